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
    PatchSpec(
        id="transformers.output_capturing.nested_collectors",
        family="transformers",
        trigger="transformers.utils.output_capturing",
        target="CompileableContextVar.set",
        mode="route",
        replacement="autopatch.areas.output_capturing.nesting:set_keeping_outer",
        requires=("transformers>=5.0",),
        fingerprints=("d3d224605f03",),  # 5.3.0, 5.12.1, 5.23.0
        reason="strict=True: under Dynamo the collector of capture_outputs is a plain attribute that a nested "
        "decorated model's exit clears, so the outer model's next hooked module reads the ContextVar, which Dynamo "
        "cannot ('Unsupported method call': GIT's vision tower, then its text layers). Under Dynamo, set hands "
        "back the outer collector as its token and reset (`_nested_collectors_reset`) restores it, as the "
        "ContextVar's token does in eager.",
        needs=("transformers.output_capturing.nested_collectors_reset",),
    ),
    PatchSpec(
        id="transformers.output_capturing.nested_collectors_reset",
        family="transformers",
        trigger="transformers.utils.output_capturing",
        target="CompileableContextVar.reset",
        mode="route",
        replacement="autopatch.areas.output_capturing.nesting:reset_to_outer",
        requires=("transformers>=5.0",),
        fingerprints=("cc3170daa0c0",),  # 5.3.0, 5.12.1, 5.23.0
        reason="The reset half of `transformers.output_capturing.nested_collectors`: a token it handed out restores "
        "the outer collector; any other token goes to upstream's reset.",
        needs=("transformers.output_capturing.nested_collectors",),
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
    (
        ('transformers.output_capturing.nested_collectors*',),
        "`strict=True` on 5.x: under Dynamo, capture_outputs keeps its collector in a plain attribute that a "
        "nested decorated model's exit clears, so the outer model's next hooked module reads the ContextVar, "
        "which Dynamo cannot (GIT: its vision tower, then its text layers). The outer collector is handed back "
        "as the token and restored on exit, as the ContextVar does in eager.",
    ),
)
