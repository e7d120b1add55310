"""``beam:`` datasets: which chats, their rendering, what is left out, errors, the CLI.

The fixtures under tests/fixtures/beam are made up in BEAM's shape (no BEAM data is
copied: the benchmark has no license): a tier ``100K`` of chats 1, 2 (with a
truncated chat file) and 10, and a chat of the 10M tier's plan-nested shape.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxwindow.cli import app
from ctxwindow.eval import DatasetError, load_dataset
from ctxwindow.eval.beam import beam_chats, from_beam
from ctxwindow.eval.loaders import benchmarks

BEAM = Path(__file__).parent / "fixtures" / "beam"
TIER = BEAM / "100K"

runner = CliRunner()


def converted(path: Path) -> dict[str, dict[str, Any]]:
    """The conversations ``from_beam`` makes of ``path``, by id."""
    return {c["id"]: c for c in from_beam(beam_chats(path)).conversations}


def messages_by_id(conversation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in conversation["messages"]}


def questions_by_id(conversation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["id"]: q for q in conversation["questions"]}


# -- which chats ------------------------------------------------------------------


def test_a_tier_folder_gives_its_chats_in_numeric_order() -> None:
    """Chat 2 before chat 10; ids name the tier, so tiers can be measured together."""
    assert [chat["chat"] for chat in beam_chats(TIER)] == ["100K/1", "100K/2", "100K/10"]
    dataset, _ = load_dataset(f"beam:{TIER}")
    assert dataset.name == f"beam:{TIER}"
    assert [c.id for c in dataset.conversations] == ["100K/1", "100K/2", "100K/10"]


def test_one_chat_folder_gives_one_conversation() -> None:
    dataset, _ = load_dataset(f"beam:{TIER / '10'}")
    assert [c.id for c in dataset.conversations] == ["100K/10"]
    assert [q.id for q in dataset.conversations[0].questions] == [
        "100K/10:information_extraction:1"
    ]


def test_beam_is_a_registered_benchmark() -> None:
    assert benchmarks()["beam"] is from_beam


# -- rendering --------------------------------------------------------------------


def test_turns_become_messages_in_order_with_their_ids() -> None:
    """Batches, turns and the messages of a turn in file order; ids are the turn ids as text."""
    chat = converted(TIER)["100K/1"]
    assert [m["id"] for m in chat["messages"]] == [str(n) for n in range(10)]
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant"] * 5


def test_content_is_as_in_the_file_markers_and_all() -> None:
    """The ->-> markers stay (they carry no evidence place, docs/eval.md); non-ASCII unchanged."""
    messages = messages_by_id(converted(TIER)["100K/1"])
    assert messages["2"]["content"] == (
        "My sister Hana lives in 大阪 and she says 抹茶パフェ is a must 🍵. ->-> 1,2"
    )
    assert messages["7"]["content"] == "With 1,000 euros you can add two nights in Nara. 加油！"
    assert messages["4"] == {
        "id": "4",
        "role": "user",
        "content": "Yes, the morning trains please.",
        "timestamp": "2024-03-15T00:00:00",
    }


def test_each_batch_is_dated_by_its_time_anchor() -> None:
    """The anchor of a batch's first message dates all of it; one that does not parse, none."""
    chats = converted(TIER)
    times = [m.get("timestamp") for m in chats["100K/1"]["messages"]]
    assert times == ["2024-03-15T00:00:00"] * 6 + ["2024-04-02T00:00:00"] * 4
    assert all("timestamp" not in m for m in chats["100K/2"]["messages"])  # "sometime in spring"


def test_the_truncated_chat_file_is_read_where_there_is_one() -> None:
    """Chat 2's chat_trunecated.json holds its first batch only; chat.json is not read."""
    chat = converted(TIER)["100K/2"]
    assert [m["id"] for m in chat["messages"]] == ["0", "1", "2", "3"]


def test_questions_ids_answers_categories_and_evidence() -> None:
    """Evidence is the union of source_chat_ids: a list, lists in it, or an object of lists."""
    questions = questions_by_id(converted(TIER)["100K/1"])
    assert questions["100K/1:knowledge_update:1"] == {
        "id": "100K/1:knowledge_update:1",
        "question": "What is my travel budget?",
        "answer": "1,000 euros",
        "evidence": ["0", "6"],
        "category": "knowledge_update",
    }
    assert questions["100K/1:event_ordering:1"]["evidence"] == ["0", "2", "6"]  # [[0, 2], [6], 2]
    assert questions["100K/1:temporal_reasoning:1"]["evidence"] == ["0", "6"]
    assert questions["100K/1:information_extraction:1"]["answer"] == "In 大阪 (Osaka)."
    assert questions["100K/1:instruction_following:1"]["answer"] == (
        "The answer is given in bullet points."
    )  # the ability's expected_compliance


def test_loaded_questions_are_asked_after_the_whole_chat() -> None:
    dataset, _ = load_dataset(f"beam:{TIER}")
    chat = dataset.conversations[0]
    assert all(set(m) == {"role", "content"} for m in chat.messages)
    assert all(q.after is None and q.date is None for q in chat.questions)
    assert len(chat.history(chat.questions[0])) == 10


def test_a_10m_chat_of_plans_is_read_plan_by_plan() -> None:
    """The 10M tier nests batches in plans ([{"plan-0": [...]}, ...]), as BEAM's code reads it."""
    dataset, _ = load_dataset(f"beam:{BEAM / '10M' / '1'}")
    chat = dataset.conversations[0]
    assert chat.id == "10M/1"
    assert chat.message_ids == ("0", "1", "2", "3")
    assert chat.messages[2] == {"role": "user", "content": "Now I grow basil too. ->-> 1,1"}
    assert chat.questions[0].evidence == ("0", "2")


# -- what is left out -------------------------------------------------------------


def test_questions_without_evidence_are_counted_in_one_note() -> None:
    """Absent (abstention) or empty source_chat_ids; the unanswerable switch changes nothing."""
    for include_unanswerable in (False, True):
        dataset, notes = load_dataset(f"beam:{TIER}", include_unanswerable=include_unanswerable)
        categories = {q.category for c in dataset.conversations for q in c.questions}
        assert "abstention" not in categories and "summarization" not in categories
        assert [n for n in notes if "source_chat_ids" in n] == [
            "left out 2 question(s) with no source_chat_ids (absent or empty), which evidence "
            "recall cannot measure: abstention 1, summarization 1"
        ]


def test_evidence_outside_the_chat_is_left_out_with_a_note() -> None:
    """Chat 2's second question names turn 4, which only the untruncated chat.json has."""
    dataset, notes = load_dataset(f"beam:{TIER}")
    chat_2 = dataset.conversations[1]
    assert [q.id for q in chat_2.questions] == ["100K/2:information_extraction:1"]
    assert (
        "question '100K/2:information_extraction:2' (information_extraction): evidence ['4'] "
        "not among the conversation's turns; left out"
    ) in notes
    assert dataset.n_questions == 5 + 1 + 1 and len(notes) == 2


# -- errors -----------------------------------------------------------------------


def tier_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(TIER, tmp_path / "100K"))


def edit(path: Path, change: Callable[[Any], Any]) -> None:
    """Rewrite the JSON file ``path`` with ``change`` applied (its result, if not None)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    result = change(data)
    path.write_text(json.dumps(data if result is None else result), encoding="utf-8")


CHAT = "1/chat.json"
QUESTIONS = "1/probing_questions/probing_questions.json"


@pytest.mark.parametrize(
    ("file", "change", "fragment"),
    [
        (CHAT, lambda d: {"batches": d},
         "chat 0 ('100K/1'): chat.json must be a list, got dict"),
        (CHAT, lambda d: d[1].update(turns={}),
         "chat 0 ('100K/1'): chat.json[1]: 'turns' must be a list, got dict"),
        (CHAT, lambda d: d[0]["turns"].__setitem__(1, "hi"),
         "chat 0 ('100K/1'): chat.json[0]: 'turns'[1] must be a list, got str"),
        (CHAT, lambda d: d[0]["turns"][1][2].__delitem__("content"),
         "chat 0 ('100K/1'): chat.json[0]: 'turns'[1][2]: 'content' is missing"),
        (CHAT, lambda d: d[1]["turns"][0][1].update(id="7"),
         "chat 0 ('100K/1'): chat.json[1]: 'turns'[0][1]: 'id' must be an integer, got str"),
        (CHAT, lambda d: d[1]["turns"][0][0].update(time_anchor=20240402),
         "chat 0 ('100K/1'): chat.json[1]: 'turns'[0][0]: 'time_anchor' must be a string, got int"),
        (CHAT, lambda d: d[1]["turns"][0][1].update(id=5),
         "conversation '100K/1', message '5': duplicate message id"),
        (CHAT, lambda d: d[1]["turns"][0][1].update(role="narrator"),
         "conversation '100K/1', message '7': unknown role 'narrator'"),
        (QUESTIONS, lambda d: list(d.values()),
         "chat 0 ('100K/1'): probing_questions/probing_questions.json: must be an object of "
         "abilities and their questions, got list"),
        (QUESTIONS, lambda d: d.update(summarization={"question": "?"}),
         "chat 0 ('100K/1'): probing_questions/probing_questions.json: 'summarization' must be "
         "a list, got dict"),
        (QUESTIONS, lambda d: d["information_extraction"][0].__delitem__("question"),
         "chat 0 ('100K/1'): probing_questions/probing_questions.json: "
         "information_extraction[0]: 'question' is missing"),
        (QUESTIONS, lambda d: d["information_extraction"][0].update(answer=["Osaka"]),
         "information_extraction[0]: 'answer' must be a string or a number, got list"),
        (QUESTIONS, lambda d: d["information_extraction"][0].update(source_chat_ids="2"),
         "information_extraction[0]: 'source_chat_ids' must be a list of turn ids (or of lists "
         "of them), or an object of such lists, got str"),
        (QUESTIONS, lambda d: d["knowledge_update"][0]["source_chat_ids"].update(updated_info=6),
         "knowledge_update[0]: 'source_chat_ids'['updated_info'] must be a list of turn ids (or "
         "of lists of them), or an object of such lists, got int"),
        (QUESTIONS, lambda d: d["event_ordering"][0].update(source_chat_ids=[[0, "2"]]),
         "event_ordering[0]: 'source_chat_ids' must be a list of turn ids (or of lists of them), "
         "or an object of such lists; '2' is not a turn id"),
        (QUESTIONS, lambda d: d["event_ordering"][0].update(source_chat_ids=[True]),
         "event_ordering[0]: 'source_chat_ids' must be a list of turn ids (or of lists of them), "
         "or an object of such lists; True is not a turn id"),
    ],
)  # fmt: skip
def test_malformed_chats_name_the_chat_the_file_and_the_key(
    tmp_path: Path, file: str, change: Callable[[Any], Any], fragment: str
) -> None:
    tier = tier_copy(tmp_path)
    edit(tier / file, change)
    with pytest.raises(DatasetError) as caught:
        load_dataset(f"beam:{tier}")
    message = str(caught.value)
    assert message.startswith(f"beam:{tier}: 1 problem(s):")
    assert fragment in message


def test_a_missing_or_broken_file_names_the_chat(tmp_path: Path) -> None:
    tier = tier_copy(tmp_path)
    (tier / QUESTIONS).unlink()
    (tier / "2" / "chat_trunecated.json").write_text("[{", encoding="utf-8")
    shutil.rmtree(tier / "10")
    (tier / "10").mkdir()
    with pytest.raises(DatasetError) as caught:
        load_dataset(f"beam:{tier}")
    problems = caught.value.problems
    assert len(problems) == 3
    assert problems[0].startswith(
        "chat 0 ('100K/1'): probing_questions/probing_questions.json: cannot read the file:"
    )
    assert problems[1].startswith("chat 1 ('100K/2'): chat_trunecated.json: not valid JSON:")
    assert problems[2] == (
        f"chat 2 ('100K/10'): neither chat_trunecated.json nor chat.json is in {tier / '10'}"
    )


def test_a_path_that_is_no_tier_nor_chat_is_a_dataset_error(tmp_path: Path) -> None:
    expected = "expected a BEAM tier folder such as chats/100K, or one chat folder"
    cases = [
        (TIER / "topics.json", "a file, not a folder"),
        (tmp_path / "missing", "no such folder"),
        (BEAM, "no chat folder in it (one with chat_trunecated.json or chat.json)"),
    ]
    for path, what in cases:
        with pytest.raises(DatasetError) as caught:
            load_dataset(f"beam:{path}")
        assert caught.value.problems == [f"{what}: {expected}"]
        assert str(caught.value).startswith(f"{path}: 1 problem(s):")


def test_skip_invalid_leaves_out_a_malformed_chat_and_says_so(tmp_path: Path) -> None:
    tier = tier_copy(tmp_path)
    edit(tier / CHAT, lambda d: d[0]["turns"][0][0].__delitem__("role"))
    dataset, problems = load_dataset(f"beam:{tier}", skip_invalid=True)
    assert [c.id for c in dataset.conversations] == ["100K/2", "100K/10"]
    assert "chat 0 ('100K/1'): chat.json[0]: 'turns'[0][0]: 'role' is missing" in problems
    # the broken chat's questions are not counted as left out for want of evidence
    assert not any("source_chat_ids" in problem for problem in problems)


# -- the command line -------------------------------------------------------------


def test_cli_measures_a_beam_tier(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["eval", "--dataset", f"beam:{TIER}", "--strategies", "token_window"]
    result = runner.invoke(app, [*args, "--budgets", "512", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "3 conversations, 7 questions" in result.stdout
    assert f"ctxwindow: skipped: beam:{TIER}: left out 2 question(s)" in result.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["results"]["token_window"]["512"]["by_category"]) == {
        "event_ordering",
        "information_extraction",
        "instruction_following",
        "knowledge_update",
        "temporal_reasoning",
    }


def test_cli_help_lists_the_beam_form() -> None:
    result = runner.invoke(app, ["eval", "--help"])
    assert result.exit_code == 0
    assert "beam:PATH" in result.stdout


def test_cli_bad_beam_path_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "--dataset", f"beam:{tmp_path}", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"ctxwindow: error: {tmp_path}: 1 problem(s):")
    assert "Traceback" not in result.output and not out.exists()
