"""Models that write their own weights while they run (4.x Gemma 3n clamps a layer's weight in place in every
forward; GPTSAN-japanese recasts its router's classifier module in every forward; 4.x Mega keeps its EMA kernel on
the module): the same values from the weights read, not written."""
