"""Tiny PaddlePaddle reference models (our own code, no paddleformers): Qwen3-VL, GLM4-MoE, GLM4 MTP.

Importing this package imports paddle; the kit reaches it only through case factories, lazily.
"""
