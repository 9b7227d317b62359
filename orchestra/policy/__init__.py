"""The trained model: policies and tokenizers (models.py), LoRA adapters (lora.py), GRPO math (grpo.py)."""
