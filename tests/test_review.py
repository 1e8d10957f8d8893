"""Review without a server: the generated interface, task payloads, the ReviewTable from task JSON
(hand-written in the shape Label Studio 1.23.2 returns), connection settings and `serve` errors.

The real-server tests are in tests/test_review_labelstudio.py.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from rubrictool import review
from rubrictool.cli import app
from rubrictool.errors import DataError, ReviewError
from rubrictool.io import write_table
from rubrictool.review import server as review_server
from rubrictool.review.tasks import read_task_predictions
from rubrictool.rubric import Rubric, list_rubrics, load_rubric, parse_rubric, scaffold_rubric

# -- the interface ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", list_rubrics(), ids=lambda p: p.stem)
def test_interface_has_one_ordinal_control_per_concept_with_every_anchor(path: Path) -> None:
    rubric = load_rubric(path)
    xml = review.render_label_config(rubric)
    assert review.parse_label_config(xml) == {c.key: c.values for c in rubric.concepts}
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    choices = {el.get("name"): el for el in root.iter("Choices")}
    for c in rubric.concepts:
        el = choices[c.key]
        assert (el.get("toName"), el.get("choice"), el.get("required")) == ("response", "single-radio", "true")
        shown = [ch.get("value") for ch in el.iter("Choice")]
        assert shown == [f"{lv.value} — {lv.anchor.replace('$', '＄')}" for lv in c.levels]
        texts = {t.get("name"): t.get("value") for t in root.iter("Text")}
        assert texts[f"definition_{c.key}"] == c.definition.replace("$", "＄")
    names = {t.get("name") for t in root.iter("Text")}
    assert "response" in names and ("question" in names) == ("question" in rubric.fields)
    assert ("reference" in names) == ("reference" in rubric.fields)
    assert ("context" in names) == ("context" in rubric.fields)


def _tiny(**over: Any) -> Rubric:
    text = scaffold_rubric("tiny", ["FC", "CC"], levels=3)
    r = parse_rubric(text)
    data = r.model_dump()
    data.update(over)
    return Rubric.model_validate(data)


def test_interface_escapes_xml_and_dollar_signs() -> None:
    data = _tiny().model_dump()
    data["concepts"][0]["definition"] = 'Uses <b>tags</b> & "quotes" for $x'
    data["concepts"][0]["levels"][0]["anchor"] = "costs $5 < $6"
    r = Rubric.model_validate(data)
    xml = review.render_label_config(r)
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)  # well-formed despite <, &, quotes
    defn = next(t.get("value") for t in root.iter("Text") if t.get("name") == "definition_FC")
    assert defn == 'Uses <b>tags</b> & "quotes" for ＄x'  # "$x" would be read as task data
    assert next(c.get("value") for c in root.iter("Choice")) == "1 — costs ＄5 < ＄6"


def test_concept_keys_that_clash_with_interface_names_are_refused() -> None:
    data = _tiny().model_dump()
    data["concepts"][0]["key"] = "response"
    with pytest.raises(ReviewError, match="clash with the interface's own names"):
        review.render_label_config(Rubric.model_validate(data))


def test_check_interface_names_what_differs() -> None:
    r = _tiny()
    xml = review.render_label_config(r)
    review.check_interface(r, xml, "p")  # matches
    data = r.model_dump()
    data["concepts"] = data["concepts"][:1] + [{**data["concepts"][1], "key": "NEW"}]
    with pytest.raises(ReviewError, match=r"not in the project: NEW; concepts not in the rubric: CC"):
        review.check_interface(Rubric.model_validate(data), xml, "p")
    four = parse_rubric(scaffold_rubric("tiny", ["FC", "CC"], levels=4))
    with pytest.raises(ReviewError, match=r"different levels for FC \(\[1, 2, 3\] vs \[1, 2, 3, 4\]\)"):
        review.check_interface(four, xml, "p")
    with pytest.raises(ReviewError, match="not valid XML"):
        review.parse_label_config("<View><Choices")


def test_parse_label_config_reads_plain_values_and_skips_non_level_controls() -> None:
    xml = """<View><Text name="t" value="$t"/>
      <Choices name="A" toName="t"><Choice value="0"/><Choice value="1"/></Choices>
      <Choices name="mood" toName="t"><Choice value="happy"/></Choices></View>"""
    assert review.parse_label_config(xml) == {"A": [0, 1]}


# -- tasks --------------------------------------------------------------------------------------------------------


def test_build_tasks_one_prediction_per_model_in_rubric_order() -> None:
    r = load_rubric("mohler")
    items = pd.DataFrame({"id": ["1", "2"], "question": ["q", "q"], "response": ["r1", "r2"],
                          "reference": [None, "ref"]})
    preds = pd.DataFrame({
        "item": ["1", "1", "1", "2"], "model": ["m2", "m1", "m1", "m1"], "concept": ["FC", "CC", "FC", "FR"],
        "level": [3, 2, 1, 2],
    })
    tasks = review.build_tasks(items, preds, r)
    assert tasks[0]["data"] == {"item_id": "1", "response": "r1", "question": "q", "reference": ""}
    p = {x["model_version"]: x["result"] for x in tasks[0]["predictions"]}
    assert [x["from_name"] for x in p["m1"]] == ["FC", "CC"]  # rubric order
    assert p["m1"][0]["value"] == {"choices": ["1"]} and p["m2"][0]["value"] == {"choices": ["3"]}
    assert all(x["to_name"] == "response" and x["type"] == "choices" for x in p["m1"])
    assert [x["model_version"] for x in tasks[1]["predictions"]] == ["m1"]
    assert "predictions" not in review.build_tasks(items, None, r)[0]


def test_prediction_rows_marked_not_ok_are_left_out(tmp_path: Path) -> None:
    r = load_rubric("mohler")
    preds = pd.DataFrame({
        "item": ["1", "1", "9"], "model": ["m", "m", "m"], "concept": ["FC", "CC", "FC"], "level": [3, None, 2],
        "evidence": ["", "", ""], "raw_ok": [True, False, True],
    })
    write_table(preds, tmp_path / "p.csv")
    df, other = read_task_predictions(tmp_path / "p.csv", r, {"1"})
    assert df[["item", "concept"]].values.tolist() == [["1", "FC"]] and other == 1
    bad = preds.assign(concept=["FC", "XX", "FC"])
    write_table(bad, tmp_path / "bad.csv")
    with pytest.raises(DataError, match=r"row 2: concept 'XX' is not in rubric mohler"):
        read_task_predictions(tmp_path / "bad.csv", r, {"1"})
    dup = preds.assign(concept=["FC", "FC", "FC"], raw_ok=True, level=[1, 2, 3])
    write_table(dup, tmp_path / "dup.csv")
    with pytest.raises(DataError, match="several FC labels from model m"):
        read_task_predictions(tmp_path / "dup.csv", r, {"1"})


# -- the ReviewTable from task JSON -----------------------------------------------------------------------------


def _ann(aid: int, who: int, labels: dict[str, int], **kw: Any) -> dict[str, Any]:
    result = [{"from_name": k, "to_name": "response", "type": "choices", "value": {"choices": [str(v)]}}
              for k, v in labels.items()]
    return {"id": aid, "completed_by": who, "result": result, "was_cancelled": False, "lead_time": 5.0, **kw}


SCHEMA = {"FC": [1, 2, 3], "CC": [1, 2, 3]}
USERS = {1: "a@x.org", 2: "b@x.org", 3: "c@x.org"}


def test_reviews_from_tasks_skips_cancelled_drafts_and_superseded() -> None:
    tasks = [
        {"id": 10, "data": {"item_id": "i1"},
         "predictions": [{"id": 1, "model_version": "gpt", "result": _ann(0, 0, {"FC": 3, "CC": 2})["result"]},
                         {"id": 2, "model_version": "llama", "result": _ann(0, 0, {"FC": 1})["result"]}],
         "annotations": [_ann(5, 1, {"FC": 1, "CC": 1}), _ann(7, 1, {"FC": 3, "CC": 3}, lead_time=9.5),
                         _ann(6, 2, {"FC": 2, "CC": 2}), _ann(8, 3, {}, was_cancelled=True)],
         "drafts": [{"id": 1, "user": "c@x.org", "result": _ann(0, 0, {"FC": 1})["result"]}]},
        {"id": 11, "data": {"item_id": "i2"}, "predictions": [], "annotations": [], "drafts": []},
    ]
    df, counts = review.reviews_from_tasks(tasks, USERS, SCHEMA)
    assert counts == {"superseded": 1, "cancelled": 1, "drafts": 1, "annotations": 2}
    assert df[["item", "reviewer", "concept", "level"]].values.tolist() == [
        ["i1", "a@x.org", "FC", 3], ["i1", "a@x.org", "CC", 3], ["i1", "b@x.org", "FC", 2], ["i1", "b@x.org", "CC", 2],
    ]
    assert df["source"].eq("human").all() and df["lead_time"].tolist() == [9.5, 9.5, 5.0, 5.0]
    assert df["differs_gpt"].tolist() == [False, True, True, False]
    assert df["differs_llama"].isna().tolist() == [False, True, False, True]  # llama had no CC label
    assert df["differs_llama"].dropna().tolist() == [True, True]


def test_reviews_from_tasks_rejects_values_outside_the_interface() -> None:
    bad = [{"id": 3, "data": {"item_id": "x"}, "predictions": [],
            "annotations": [_ann(1, 1, {"FC": 7})], "drafts": []}]
    with pytest.raises(ReviewError,
                       match=r"task 3 annotation 1: concept FC holds \['7'\], not one level of \[1, 2, 3\]"):
        review.reviews_from_tasks(bad, USERS, SCHEMA)
    bad[0]["annotations"] = [_ann(1, 1, {"FC": 2})]  # a malformed prediction only loses its differs flag
    bad[0]["predictions"] = [{"id": 9, "model_version": "m", "result": _ann(0, 0, {"FC": 9})["result"]}]
    df, _ = review.reviews_from_tasks(bad, USERS, SCHEMA)
    assert df["level"].tolist() == [2] and df["differs_m"].isna().all()
    bad[0]["annotations"] = [{"id": 1}]  # what an `include=` listing without `expand` returns
    with pytest.raises(ReviewError, match="without its result"):
        review.reviews_from_tasks(bad, USERS, SCHEMA)


def test_no_reviews_gives_an_empty_table_with_the_columns() -> None:
    df, counts = review.reviews_from_tasks([], USERS, SCHEMA)
    assert list(df.columns) == ["item", "reviewer", "concept", "level", "source", "lead_time", "annotation"]
    assert len(df) == 0 and counts == {}


# -- connection settings -----------------------------------------------------------------------------------------


def test_connection_from_options_then_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(review.ENV_URL, "http://ls.example:8080/")
    monkeypatch.setenv(review.ENV_KEY, "envkey123")
    c = review.resolve_connection(folder=tmp_path)
    assert (c.url, c.api_key) == ("http://ls.example:8080", "envkey123")
    c = review.resolve_connection("http://127.0.0.1:9", "optkey", folder=tmp_path)
    assert (c.url, c.api_key) == ("http://127.0.0.1:9", "optkey")
    assert "optkey" not in repr(c) and "optkey" not in str(c)


def test_connection_errors_say_what_to_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(review.ENV_URL, raising=False)
    monkeypatch.delenv(review.ENV_KEY, raising=False)
    with pytest.raises(ReviewError, match=r"no Label Studio URL") as no_url:
        review.resolve_connection(folder=tmp_path)
    with pytest.raises(ReviewError, match=r"no Label Studio API key for http://127.0.0.1:9") as no_key:
        review.resolve_connection("http://127.0.0.1:9", folder=tmp_path)
    # the library says what is missing; the hint (shown by the CLI) says what to pass or set
    assert "pass --url http://HOST:PORT" in (no_url.value.hint or "")
    assert "$LABEL_STUDIO_URL" in (no_url.value.hint or "")
    assert "pass --api-key" in (no_key.value.hint or "") and "$LABEL_STUDIO_API_KEY" in (no_key.value.hint or "")
    with pytest.raises(ReviewError, match="not an http"):
        review.resolve_connection("127.0.0.1:9", "k", folder=tmp_path)


def test_connection_falls_back_to_the_running_local_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(review.ENV_URL, raising=False)
    monkeypatch.delenv(review.ENV_KEY, raising=False)
    (tmp_path / "admin-token").write_text("tok-from-file\n")
    (tmp_path / "server.json").write_text(f'{{"url": "http://127.0.0.1:8123", "pid": {os.getpid()}}}')
    c = review.resolve_connection(folder=tmp_path)
    assert (c.url, c.api_key) == ("http://127.0.0.1:8123", "tok-from-file")
    with pytest.raises(ReviewError, match="no Label Studio API key"):  # the file token is only for that server
        review.resolve_connection("http://elsewhere:8080", folder=tmp_path)
    (tmp_path / "server.json").write_text('{"url": "http://127.0.0.1:8123", "pid": 999999999}')  # not running
    with pytest.raises(ReviewError, match="no Label Studio URL"):
        review.resolve_connection(folder=tmp_path)


# -- serve without a server ---------------------------------------------------------------------------------------


def test_secret_files_are_created_0600(tmp_path: Path) -> None:
    v = review_server._secret_file(tmp_path / "d" / "tok", lambda: "s3cret")
    assert v == "s3cret" and stat.S_IMODE((tmp_path / "d" / "tok").stat().st_mode) == 0o600
    assert review_server._secret_file(tmp_path / "d" / "tok", lambda: "other") == "s3cret"  # kept across starts


def test_server_env_keeps_everything_in_the_folder(tmp_path: Path) -> None:
    base = {"HOME": "/home/x", "USERNAME": "x", "PASSWORD": "p", "PORT": "1", "HOST": "h",
            review.ENV_KEY: "k", "PATH": "/bin"}
    env = review_server._server_env(tmp_path, "tok", "pw", base)
    for k in ("USERNAME", "PASSWORD", "PORT", "HOST", review.ENV_KEY):
        assert k not in env
    for k in ("LABEL_STUDIO_BASE_DATA_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        assert env[k].startswith(str(tmp_path))
    assert env["LABEL_STUDIO_USER_TOKEN"] == "tok" and env["LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN"] == "true"


def test_serve_says_when_label_studio_is_missing(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["review", "serve", "--dir", str(tmp_path / "ls"), "--label-studio-bin",
                                   str(tmp_path / "nope" / "label-studio")])
    assert res.exit_code == 1 and "not an executable" in res.output and "--label-studio-bin" in res.output
    assert not (tmp_path / "ls").exists()


def test_find_label_studio_explains_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(review_server, "REPO_DIR", tmp_path / "pkg")
    with pytest.raises(ReviewError, match=r"not installed: run `bash setup.sh --all`"):
        review.find_label_studio()


def test_serve_refuses_a_busy_port(tmp_path: Path) -> None:
    fake = tmp_path / "label-studio"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = CliRunner().invoke(app, ["review", "serve", "--dir", str(tmp_path / "ls"), "--port", str(port),
                                       "--label-studio-bin", str(fake)])
    assert res.exit_code == 1 and f"port {port} on 127.0.0.1 is already in use" in res.output


def test_a_server_that_dies_on_start_is_one_message(tmp_path: Path) -> None:
    fake = tmp_path / "label-studio"
    fake.write_text("#!/bin/sh\necho 'django.db.utils.OperationalError: disk full' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ReviewError,
                       match=r"exited with code 3 while starting; django.db.utils.OperationalError: disk full"):
        review.start_server(tmp_path / "ls", port=review.free_port(), bin=fake, timeout=30)
    assert stat.S_IMODE((tmp_path / "ls" / "admin-token").stat().st_mode) == 0o600
    assert not (tmp_path / "ls" / "server.json").exists()


def test_push_refuses_a_title_label_studio_would_reject_before_connecting(tmp_path: Path) -> None:
    write_table(pd.DataFrame({"id": ["1"], "response": ["r"]}), tmp_path / "items.csv")
    down = review.Connection(f"http://127.0.0.1:{review.free_port()}", "k")
    with pytest.raises(ReviewError, match="has 2 characters; Label Studio needs 3 to 50"):
        review.push(down, load_rubric("mohler"), tmp_path / "items.csv",
                    options=review.PushOptions(project="ab"))
