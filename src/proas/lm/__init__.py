"""``proas lm``: tools around the ``lm`` policy's Hugging Face models (``proas.lm.cli``): export a
run's model, train an env tokenizer, write a from-scratch model. The policy itself is
``proas.policies.lm``."""
