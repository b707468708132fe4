"""Pytree registrations: transformers' caches (layered, 4.48-4.55 legacy, model-local) and 4.x model outputs
as export inputs and outputs."""
