"""What every study that trains the recall model shares above the engine (04, 05, 09, 10,
11, 12): its tables and its flags.

==============  ==========================================================================
``columns``     the training tables' columns and ``make verify`` rules: the per-step curves
                and per-seed summary (04, 05, 09, 12), the width sweep's (10, the card);
                no JAX, so declarations import it
``tables``      training results -> those curves and summaries (milestones, plateaus)
``flags``       the recall flags every recall training script shares (``--reading``)
==============  ==========================================================================

This package's ``__init__`` imports nothing; import the module you need.
"""
