"""The rows of this area. torch.distributions validates a distribution's parameters when it is built and each
scored sample (``validate_args``, on by default) by reading a check into an ``if``: under export a data-dependent
value, and the export stopped (4.x TAPAS's question-answering head, BLT's entropy patcher, any model that builds a
distribution in forward). The program makes the same checks when it runs (strict export: none, with a note).
"""

from __future__ import annotations

from ...spec import PatchSpec
from ..bounds import TORCH

REASON = (
    "torch.distributions validates its arguments by default: building a distribution (Categorical(logits=...), "
    "Bernoulli...) or scoring a sample reads torch._is_all_true of the constraint's check into an if, which under "
    "export is a data-dependent value: the export stopped ('Could not guard on data-dependent expression Eq(u0, "
    "1)'; 4.x TAPAS's question answering, BLT's patcher). Rewritten from the source: the program makes the same "
    "check when it runs (torch._check_tensor_all) and raises there, where eager raises when it validates. Under "
    "strict=True, where Dynamo cannot trace torch's constraint code, the distribution is built unvalidated (as "
    "validate_args=False builds it) and the export's report says so."
)

ROWS = (
    PatchSpec(
        id="torch.distributions.parameters_checked_at_run",
        family="torch",
        trigger="torch.distributions.distribution",
        target="Distribution.__init__",
        mode="rewrite",
        replacement="autopatch.areas.distributions.checks:parameters_checked_at_run",
        requires=TORCH,
        fingerprints=("0cf5683ec025",),  # 2.13.0 (the only release measured for this row)
        reason=REASON,
    ),
    PatchSpec(
        id="torch.distributions.samples_checked_at_run",
        family="torch",
        trigger="torch.distributions.distribution",
        target="Distribution._validate_sample",
        mode="rewrite",
        replacement="autopatch.areas.distributions.checks:samples_checked_at_run",
        requires=TORCH,
        fingerprints=("7e1f53bf006f",),  # 2.13.0
        reason=REASON,
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ("torch.distributions.parameters_checked_at_run", "torch.distributions.samples_checked_at_run"),
        "A `torch.distributions` object built in forward (4.x TAPAS's question answering, BLT's patcher) validates "
        "its parameters and scored samples by reading a check into an `if`: a data-dependent value the export "
        "stopped on. The program makes the same checks when it runs, and raises there as eager raises (`strict=True`, "
        "which cannot trace them: built unvalidated, with a note).",
    ),
)
