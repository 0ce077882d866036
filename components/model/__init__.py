"""Model code below the stages: loading and precision, attention, the frozen top layers, the tiny Qwen2."""
