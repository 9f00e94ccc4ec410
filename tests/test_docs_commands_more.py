"""The longest pages of tests/test_docs_commands.py, run in a file of their own (see that file)."""

import pytest

from test_docs_commands import LONGEST, ROOT, run_page


@pytest.mark.parametrize("name", LONGEST)
def test_the_page_runs_as_written(name, tmp_path, upstream, methods):
    run_page(ROOT / "docs" / name, tmp_path)
