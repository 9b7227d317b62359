"""The trained model (floor 5 of the core): policies and tokenizers (models.py, tokenizer.py: its corpus is the
agent's own prompts, hence above agent/), LoRA adapters (lora.py), memory estimates (memory.py), GRPO math
(grpo.py)."""
