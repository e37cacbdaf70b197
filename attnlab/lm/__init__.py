"""The language-model wing: a small byte-level causal LM, its training, and what decides its
attention temperature from the optimizer's side (14, 11's ``--task lm`` card, a
researcher's own training loop).

==================  ==========================================================================
``model``           ``CausalLM``: the decoder (Flax linen), every head through
                    ``Mechanism.attend``; the per-layer logit statistics it records
``loss``            next-byte cross-entropy, the z-loss, their sum, the held-out loss
``train``           the task and its loop, readable top to bottom: text -> byte windows,
                    step (its optimizer from ``attnlab.training.optimizers``), the lanes of
                    a learning-rate sweep on the engine (``attnlab.training.lanes``)
``lm_task``         the language model as a ``Task`` of ``attnlab.training.tasks.TASKS``
``flags``           the flags every study that trains it shares: ``--optimizer``,
                    ``--qk-clip``, the warmup of a run's length
``qk_clip``         QK-Clip (Kimi K2, Megatron-LM): rescale each head's W_q, W_k after a step
                    so that its largest logit is at most ``tau``
``ledger``          the temperature ledger: per layer and head, what sets the logits' scale
``trajectory``      the ledger along a run (``train_lanes``' ``on_params`` hook), with the owner
                    and how far W_Q, W_K moved from step 0 (15)
``corpus``          a long text read offline: the standard library's source (15's long run)
``sweep``           a sweep's trained lanes -> its tables (losses, ownership, drift, lengths)
``sweep_tables``    readings of those tables, pandas only (sensitivity, best rate)
``export``          a trained ``CausalLM`` written as a GPT-2 checkpoint (``models.gpt2``
                    reads it back)
==================  ==========================================================================

The recall task (``attnlab.recall``) is the other wing; neither imports the other. This
package's ``__init__`` imports nothing.
"""
