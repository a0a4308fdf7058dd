"""The shared RoPE decoder that most families are an arrangement of: its block, how it reads config.json (a family's
Spec), its tensor names and parameter table, and those of its mixture of experts and latent attention.
"""
