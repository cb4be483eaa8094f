"""docs/metrics.md's table lists exactly the metric families /metrics exports."""

import re

import pytest

from conductor_site import metrics as conductor_metrics
from tests.server import ROOT


@pytest.mark.django_db
def test_the_metrics_page_lists_every_exported_family_and_no_other():
    exported = {family.name for family in conductor_metrics.registry.collect()}
    listed = re.findall(r"^\| `(conductor_[a-z_]+)` \|", (ROOT / "docs" / "metrics.md").read_text(), flags=re.M)
    assert len(listed) == len(set(listed))
    assert set(listed) == exported
