"""What several studies share that is not the engine: sweeps and their tables.

==============  ==========================================================================
``widths``      the recall demo across widths and learning rates, as lanes of the engine,
                with diagnostics of the temperature (experiment 10 and the card)
``lm``          a language model's learning-rate sweep as tables, from its trained lanes
                (experiment 14 and the card's ``--task lm``)
``lm_tables``   readings of those tables, pandas only (sensitivity, best rate)
==============  ==========================================================================
"""
