"""torch.distributions under export (family ``torch``): argument and sample checks made by the program at run time."""
