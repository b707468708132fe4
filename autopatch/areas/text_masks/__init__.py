"""Text models whose own mask code decides with Python on data or on a size."""
