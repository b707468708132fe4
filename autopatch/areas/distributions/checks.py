"""Rewriters for the rows of ``distributions/rows.py``.

A distribution built with argument validation (torch's default unless Python runs with -O) checks its parameters
when it is built, and each sample ``log_prob`` scores, by reading ``torch._is_all_true`` of the constraint's check
into an ``if``. Under export the check is a traced tensor: the read is a data-dependent value and the export stops.
The same check is made by the program when it runs (``runtime.all_true_at_run``): a program given NaN logits raises
there, as eager raises when it builds the distribution. Under ``strict=True`` Dynamo cannot trace torch's constraint
code at all (it is on Dynamo's skip list): the distribution is then built unvalidated (``runtime.validating``), with a
note in the export's report.
"""

from __future__ import annotations

from ...kit import substitute_expressions

_READ = "not torch._is_all_true(valid)"


def parameters_checked_at_run(init):
    """``Distribution.__init__``: each parameter's constraint checked by the program."""
    why = ("f'Expected parameter {param} of distribution {type(self).__name__} to satisfy the constraint "
           "{constraint!r}, but found invalid values'")
    return substitute_expressions(init, {_READ: f"not __autopatch_rt.all_true_at_run(valid, {why})",
                                         # strict=True: Dynamo cannot trace the checks (runtime.validating)
                                         "self._validate_args": "__autopatch_rt.validating(self)"})


def samples_checked_at_run(validate_sample):
    """``Distribution._validate_sample``: the scored value's support checked by the program."""
    why = ("f'Expected value argument to be within the support ({support!r}) of the distribution "
           "{type(self).__name__}, but found invalid values'")
    return substitute_expressions(validate_sample, {_READ: f"not __autopatch_rt.all_true_at_run(valid, {why})"})
