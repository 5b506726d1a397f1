"""Input limits: templates on a size and time budget, big files refused by size (a suite file's limit a setting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.base.render import render, render_value
from engine.base.template_budget import MAX_STEPS, TemplateBudgetError
from engine.suite import load_suites

HOSTILE = {
    "huge power": ("{{ 3 ** 300000000 }}", "bits"),
    "nested range loops": ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
                           "loop steps"),
    "nested loops over data": ("{% for a in xs %}{% for b in xs %}{% for c in xs %}{% endfor %}{% endfor %}"
                               "{% endfor %}", "loop steps"),
    "string repetition": ("{{ 'x' * 2000000000 }}", "repeating"),
    "list repetition": ("{{ ([1] * 2000000000)|length }}", "repeating"),
    "center filter": ("{{ 'x'|center(2000000000) }}", "center()"),
    "center method": ("{{ 'x'.center(2000000000) }}", "str.center()"),
    "ljust method": ("{{ 'x'.ljust(2000000000) }}", "str.ljust()"),
    "indent filter": ("{{ 'a\nb'|indent(2000000000) }}", "indent()"),
    "format width": ("{{ '{:>2000000000}'.format(1) }}", "format width"),
    "nested format spec": ("{{ '{:{}}'.format(1, 2000000000) }}", "nested"),
    "percent width": ("{{ '%2000000000s' % 1 }}", "%-format width"),
    "format filter width": ("{{ '%2000000000s'|format(1) }}", "%-format width"),
    "doubling with ~": ("{% set ns = namespace(x='x') %}{% for i in range(40) %}{% set ns.x = ns.x ~ ns.x %}"
                        "{% endfor %}{{ ns.x|length }}", "joining with ~"),
    "replace blow-up": ("{{ ('x' * 100000).replace('x', 'y' * 100000) }}", "str.replace()"),
    "oversized output": ("{% for i in range(1000) %}{{ 'y' * 100000 }}{% endfor %}", "rendered text passed"),
    "slice count": ("{{ [1, 2]|slice(2000000000)|list|length }}", "loop steps"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_templates_are_refused(case: str) -> None:
    template, words = HOSTILE[case]
    variables = {"xs": list(range(1000))}
    with pytest.raises(TemplateBudgetError, match="template budget") as caught:
        render(template, variables)
    assert words in str(caught.value)
    if template.startswith("{{") and template.endswith("}}") and "{{" not in template[2:]:
        with pytest.raises(TemplateBudgetError):   # the native-value path is on the same budget
            render_value(template, variables)


def test_ordinary_templates_still_render() -> None:
    assert render("{{ 2 ** 10 }} {{ 'ab' * 3 }} {{ 'x'|center(5) }}|{{ '%5s' % 'a' }}", {}) == "1024 ababab   x  |    a"
    assert render("{% for i in range(3) %}{{ i ~ '-' }}{% endfor %}", {}) == "0-1-2-"
    assert render("{{ '{:>4}'.format(7) }} {{ 'a b'.replace(' ', '_') }}", {}) == "   7 a_b"
    assert render_value("{{ n * 2 }}", {"n": 21}) == 42
    loops = "{% for i in range(" + str(MAX_STEPS // 2 - 1) + ") %}{% endfor %}ok"
    assert render(loops, {}) == "ok"   # a big loop within the budget is fine


def test_validate_refuses_a_hostile_template_quickly(tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\ndefaults: {eval: {none: true}}\ntests:\n"
                     "  - id: a\n    prompt: \"{{ 3 ** 300000000 }}\"\n"
                     "  - id: b\n    prompt: \"{% for i in range(99999) %}{% for j in range(99999) %}x"
                     "{% endfor %}{% endfor %}\"\n  - id: c\n    prompt: fine\n")
    suites, diagnostics = load_suites([suite])
    errors = [str(d) for d in diagnostics if d.severity == "error"]
    assert suites == [] and len(errors) == 2, errors
    assert all("template budget" in e and "s.yaml:" in e for e in errors)


def test_a_huge_yaml_in_a_folder_is_refused_by_size_without_being_read(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "suites"
    folder.mkdir()
    big = folder / "big.yaml"
    with big.open("wb") as handle:   # 300 MB, one line (sparse: no disk used)
        handle.truncate(300 * 1024 * 1024)
    (folder / "ok.yaml").write_text("suite: ok\ntests:\n  - id: a\n    prompt: hi\n    eval: {contains: hi}\n")
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    suites, diagnostics = load_suites([folder])
    assert [s.id for s in suites] == ["ok"]
    assert any("big.yaml" in str(d) and "300.0 MB" in str(d) and "limited to 5 MB" in str(d)
               and "ENGINE_MAX_SUITE_MB" in str(d) for d in diagnostics)
    assert "big.yaml" not in opened


def _big_suite(folder: Path, megabytes: float) -> Path:
    """A suite file of about `megabytes` MB: 1,000 tests with long prompts."""
    filler = "x" * int(megabytes * 1024 * 1024 / 1000)
    path = folder / "big.yaml"
    path.write_text("suite: big\ntests:\n" + "".join(f"  - id: t{i}\n    prompt: \"{i} {filler}\"\n"
                                                         "    eval: {contains: ok}\n" for i in range(1000)))
    return path


def test_a_suite_file_over_the_limit_names_the_setting_that_raises_it(tmp_path: Path) -> None:
    from tests.run.e2e import engine

    path = _big_suite(tmp_path, 6)
    refused = engine("validate", str(path))
    assert refused.returncode == 1
    assert "limited to 5 MB (ENGINE_MAX_SUITE_MB)" in refused.stderr + refused.stdout
    assert "ENGINE_MAX_SUITE_MB=7" in refused.stderr + refused.stdout   # the size that would let it in
    read = engine("validate", str(path), env={"ENGINE_MAX_SUITE_MB": "7"})
    assert read.returncode == 0, read.stdout + read.stderr
    assert "1000 tests" in read.stdout + read.stderr


@pytest.mark.parametrize("value", ["lots", "0", "-3", "nan", "inf"])
def test_a_suite_size_setting_that_is_no_size_is_an_error_naming_it(tmp_path: Path, value: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "s.yaml").write_text("suite: s\ntests:\n  - id: a\n    prompt: hi\n")
    monkeypatch.setenv("ENGINE_MAX_SUITE_MB", value)
    suites, diagnostics = load_suites([tmp_path / "s.yaml"])
    assert suites == []
    [problem] = diagnostics
    assert f"ENGINE_MAX_SUITE_MB={value} is not a size in MB" in problem.message
