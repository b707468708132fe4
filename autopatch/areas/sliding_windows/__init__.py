"""Sliding-window cache layers and the SDPA mask: one program for every past length, inside, across and beyond
the window."""
