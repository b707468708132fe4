"""Models that write their own weights while they run (4.x Gemma 3n clamps a layer's weight in place in every
forward; GPTSAN-japanese recasts its router's classifier module in every forward): the same values from the weight
read, not written."""
