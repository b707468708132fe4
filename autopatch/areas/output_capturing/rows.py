"""The rows of this area. transformers 5.x output capturing (``capture_outputs``): its hooks installed before an export
traces.
"""

from __future__ import annotations

from ...spec import PatchSpec

ROWS = (
    PatchSpec(
        id="transformers.output_capturing.hooks_before_trace",
        family="transformers",
        trigger="transformers.utils.output_capturing",
        target="maybe_install_capturing_hooks",
        mode="install",
        replacement="autopatch.areas.output_capturing.hooks:install_hooks_before_trace",
        requires=("transformers>=5.0",),
        reason="strict=True: a 5.x model decorated with capture_outputs installs its output hooks on its first call, "
        "under a threading.Lock Dynamo cannot enter ('Unsupported context manager ... lock'), so a model (or a "
        "vision tower) first called inside the export stops. When an export starts, that first-call installation "
        "runs for the exported module's capturing submodules, outside the trace, as their first eager call would.",
    ),
)

#: The README's lines for this area's rows (``registry.markdown_table``; tests/test_readme.py keeps them in step):
#: (ids or globs, what and why). Every row is named by exactly one line.
SUMMARIES = (
    (
        ('transformers.output_capturing.hooks_before_trace',),
        '`strict=True` on 5.x: a model whose `forward` is decorated with `capture_outputs` (base models, '
        'vision towers) installs its output hooks on its first call, under a `threading.Lock` Dynamo '
        'cannot enter ("Unsupported context manager"): a model exported straight after it is built stops. '
        "When an export starts, that first-call installation runs for the exported module's capturing "
        'submodules, outside the trace, exactly as their first eager call would.',
    ),
)
