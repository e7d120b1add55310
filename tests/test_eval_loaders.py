"""``locomo:`` and ``longmemeval:`` datasets: rendering, what is left out, errors, the CLI."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ctxwindow.cli import app
from ctxwindow.eval import DatasetError, load_dataset
from ctxwindow.eval.dataset import parse_dataset
from ctxwindow.eval.loaders import from_locomo, from_longmemeval

FIXTURES = Path(__file__).parent / "fixtures"
LOCOMO = FIXTURES / "locomo_small.json"
LONGMEMEVAL = FIXTURES / "longmemeval_small.json"
LOCOMO_DEV = Path(__file__).parents[2] / "shared" / "data" / "locomo-dev.json"

runner = CliRunner()


def fixture(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def messages_by_id(conversation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in conversation["messages"]}


def questions_by_id(conversation: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["id"]: q for q in conversation["questions"]}


def write(tmp_path: Path, data: Any, name: str = "bench.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


# -- LoCoMo rendering -------------------------------------------------------------


def test_locomo_turns_become_messages_in_session_order() -> None:
    """One message per turn, id = dia_id; session_10 comes after session_2."""
    demo = from_locomo(fixture(LOCOMO)).conversations[0]
    assert demo["id"] == "demo-1"
    assert [m["id"] for m in demo["messages"]] == ["D1:1", "D1:2", "D2:1", "D2:2", "D10:1", "D10:2"]


def test_locomo_roles_content_and_session_headers() -> None:
    """speaker_a is the user, speaker_b the assistant; each session's first turn has a header."""
    messages = messages_by_id(from_locomo(fixture(LOCOMO)).conversations[0])
    assert messages["D1:1"]["role"] == "user" and messages["D1:2"]["role"] == "assistant"
    assert messages["D1:1"]["content"] == (
        "[Session 1 - 1:56 pm on 8 May, 2023]\nAnn: I adopted a cat called Miso last week."
    )
    assert messages["D2:2"]["content"] == "Bo: I still live in Oslo."
    assert messages["D10:1"]["content"] == (
        "[Session 10 - sometime in late autumn]\nBo: 我终于学会做饺子了 🥟🎉"
    )


def test_locomo_image_turns_carry_their_caption() -> None:
    messages = messages_by_id(from_locomo(fixture(LOCOMO)).conversations[0])
    assert messages["D1:2"]["content"] == (
        "Bo: Lovely! Here is my garden. [shares a photo: a photo of a small garden with tomatoes]"
    )


def test_locomo_timestamps_are_iso_or_absent() -> None:
    """Every turn of a session gets its date as ISO 8601; an unparseable date gives none."""
    messages = messages_by_id(from_locomo(fixture(LOCOMO)).conversations[0])
    assert messages["D1:1"]["timestamp"] == messages["D1:2"]["timestamp"] == "2023-05-08T13:56:00"
    assert messages["D2:1"]["timestamp"] == "2023-06-01T10:05:00"
    assert "timestamp" not in messages["D10:1"] and "timestamp" not in messages["D10:2"]


def test_locomo_questions_ids_answers_evidence_and_categories() -> None:
    """Answers become strings; malformed evidence strings are split and repaired."""
    questions = questions_by_id(from_locomo(fixture(LOCOMO)).conversations[0])
    assert questions["demo-1:q1"] == {
        "id": "demo-1:q1",
        "question": "What vegetables grow in Bo's garden?",
        "answer": "tomatoes",
        "evidence": ["D1:2"],
        "category": "single-hop",
    }
    assert questions["demo-1:q2"]["answer"] == "2023"
    assert questions["demo-1:q2"]["category"] == "temporal"
    assert questions["demo-1:q3"]["evidence"] == ["D1:1", "D10:2"]  # "D1:1; D10:2"
    assert questions["demo-1:q6"]["evidence"] == ["D10:1", "D2:1"]  # "D:10:1", " D2:1"
    assert all("after" not in q for q in questions.values())


def test_locomo_evidence_with_a_leading_zero_names_the_turn(tmp_path: Path) -> None:
    """ "D10:02" (as locomo10.json writes "D30:05") is turn D10:2; it was a turn that does
    not exist, and the question was left out."""
    data = fixture(LOCOMO)
    data[0]["qa"][0]["evidence"] = ["D10:02"]
    data[0]["qa"][1]["evidence"] = ["D02:1; D01:02"]
    questions = questions_by_id(from_locomo(data).conversations[0])
    assert questions["demo-1:q1"]["evidence"] == ["D10:2"]
    assert questions["demo-1:q2"]["evidence"] == ["D2:1", "D1:2"]
    dataset, notes = load_dataset(f"locomo:{write(tmp_path, data)}")
    assert dataset.n_questions == 5  # as with the file's own ids: none more left out
    assert dataset.conversations[0].questions[0].evidence == ("D10:2",)
    assert not any("demo-1:q1" in note or "demo-1:q2" in note for note in notes)


def test_locomo_loads_as_a_dataset() -> None:
    """Through load_dataset: ids and timestamps are not sent; questions follow the whole talk."""
    dataset, _ = load_dataset(f"locomo:{LOCOMO}")
    assert dataset.name == f"locomo:{LOCOMO}"
    assert [c.id for c in dataset.conversations] == ["demo-1", "demo-2"]
    demo = dataset.conversations[0]
    assert demo.message_ids == ("D1:1", "D1:2", "D2:1", "D2:2", "D10:1", "D10:2")
    assert all(set(m) == {"role", "content"} for m in demo.messages)
    assert [q.id for q in demo.questions] == ["demo-1:q1", "demo-1:q2", "demo-1:q3", "demo-1:q6"]
    question = demo.questions[0]
    assert question.after is None and question.date is None
    assert len(demo.history(question)) == 6


# -- LoCoMo: what is left out -----------------------------------------------------


def test_locomo_adversarial_questions_are_left_out_unless_asked() -> None:
    dataset, notes = load_dataset(f"locomo:{LOCOMO}")
    assert "adversarial" not in {q.category for c in dataset.conversations for q in c.questions}
    assert "left out 1 adversarial question(s) (category 5" in "\n".join(notes)
    assert "--include-unanswerable" in "\n".join(notes)

    dataset, notes = load_dataset(f"locomo:{LOCOMO}", include_unanswerable=True)
    adversarial = [q for q in dataset.conversations[0].questions if q.category == "adversarial"]
    assert [(q.id, q.answer, q.evidence) for q in adversarial] == [
        ("demo-1:q5", "Not mentioned in the conversation", ("D2:2",))
    ]
    assert not any("adversarial" in note for note in notes)


def test_locomo_unmeasurable_questions_are_left_out_with_a_note() -> None:
    """Empty evidence, or evidence naming turns that do not exist: noted, never fatal."""
    for skip_invalid in (False, True):
        dataset, notes = load_dataset(f"locomo:{LOCOMO}", skip_invalid=skip_invalid)
        assert dataset.n_questions == 5
        assert "question 'demo-1:q4' (open-domain): no evidence turn in the file; left out" in notes
        assert (
            "question 'demo-1:q7' (single-hop): evidence ['D9:9'] not among the conversation's "
            "turns; left out"
        ) in notes


def test_locomo_with_no_measurable_question_is_an_error(tmp_path: Path) -> None:
    data = fixture(LOCOMO)[:1]
    data[0]["qa"] = [q for q in data[0]["qa"] if not q["evidence"]]
    with pytest.raises(DatasetError, match="no valid question to evaluate"):
        load_dataset(f"locomo:{write(tmp_path, data)}")


# -- LongMemEval ------------------------------------------------------------------


def test_longmemeval_instances_become_one_question_conversations() -> None:
    """Sessions sorted by date, ids SESSION:TURN, a header per session, has_answer as evidence."""
    conversation = from_longmemeval(fixture(LONGMEMEVAL)).conversations[0]
    assert conversation["id"] == "lme_user_1"
    ids = [m["id"] for m in conversation["messages"]]
    assert ids == ["s_a:1", "s_a:2", "s_b:1", "s_b:2", "s_c:1", "s_c:2"]
    messages = messages_by_id(conversation)
    assert messages["s_a:1"] == {
        "id": "s_a:1",
        "role": "user",
        "content": "[Session s_a - 2023/05/20 (Sat) 02:21]\n"
        "My hamster Biscuit loves sunflower seeds.",
        "timestamp": "2023-05-20T02:21:00",
    }
    assert messages["s_c:2"]["role"] == "assistant"
    assert messages["s_c:2"]["content"] == "祝你生日快乐，万事如意！🎉"
    assert conversation["questions"] == [
        {
            "id": "lme_user_1",
            "question": "What is the name of my hamster?",
            "answer": "Biscuit",
            "evidence": ["s_a:1"],
            "category": "single-session-user",
            "date": "2023-05-30T23:40:00",
        }
    ]


def test_longmemeval_keeps_file_order_when_a_date_does_not_parse() -> None:
    """Also: a session repeated in one history gets ids S#2:N; a number answer becomes text."""
    conversation = from_longmemeval(fixture(LONGMEMEVAL)).conversations[-1]
    assert conversation["id"] == "lme_update_3"
    ids = [m["id"] for m in conversation["messages"]]
    assert ids == ["k_2:1", "filler_9:1", "filler_9:2", "k_1:1", "filler_9#2:1", "filler_9#2:2"]
    messages = messages_by_id(conversation)
    assert "timestamp" not in messages["k_1:1"]
    assert messages["k_1:1"]["content"] == "[Session k_1 - unknown]\nI have two dogs."
    assert messages["filler_9#2:1"]["content"].startswith("[Session filler_9 - 2023/01/01 (Sun)")
    question = conversation["questions"][0]
    assert question["answer"] == "3" and question["evidence"] == ["k_2:1", "k_1:1"]
    assert question["date"] == "sometime in 2024"  # as given when it does not parse


def test_longmemeval_abstention_and_unlabelled_instances() -> None:
    """_abs instances are counted out unless asked; instances without has_answer always out."""
    dataset, notes = load_dataset(f"longmemeval:{LONGMEMEVAL}")
    assert [c.id for c in dataset.conversations] == ["lme_user_1", "lme_update_3"]
    assert "question 'lme_multi_2' (multi-session): no evidence turn in the file; left out" in notes
    assert any(note.startswith("left out 1 abstention question(s)") for note in notes)

    dataset, notes = load_dataset(f"longmemeval:{LONGMEMEVAL}", include_unanswerable=True)
    assert [c.id for c in dataset.conversations] == ["lme_user_1", "lme_user_1_abs", "lme_update_3"]
    assert dataset.conversations[1].questions[0].evidence == ("s_a:1",)
    assert len(notes) == 1 and "lme_multi_2" in notes[0]


def test_longmemeval_question_date_reaches_the_question() -> None:
    dataset, _ = load_dataset(f"longmemeval:{LONGMEMEVAL}")
    assert [c.questions[0].date for c in dataset.conversations] == [
        "2023-05-30T23:40:00",
        "sometime in 2024",
    ]


# -- the date of a question in JSON datasets ---------------------------------------


def test_json_datasets_may_give_a_question_date() -> None:
    conversation = {
        "id": "c",
        "messages": [{"id": "m1", "role": "user", "content": "I moved to Lyon."}],
        "questions": [
            {"id": "q1", "question": "Where?", "answer": "Lyon", "evidence": ["m1"],
             "date": "2024-05-01"},
            {"id": "q2", "question": "Where?", "answer": "Lyon", "evidence": ["m1"], "date": 5},
        ],
    }  # fmt: skip
    dataset, problems = parse_dataset([conversation], "d", skip_invalid=True)
    assert dataset.conversations[0].questions[0].date == "2024-05-01"
    assert problems == ["conversation 'c', question 'q2': 'date' must be a string"]


# -- errors ----------------------------------------------------------------------


def lo(change: Callable[[Any], object]) -> Any:
    data = copy.deepcopy(fixture(LOCOMO))
    change(data)
    return data


def lme(change: Callable[[Any], object]) -> Any:
    data = copy.deepcopy(fixture(LONGMEMEVAL))
    change(data)
    return data


@pytest.mark.parametrize(
    ("prefix", "data", "fragment"),
    [
        ("locomo", fixture(LONGMEMEVAL), "not a LoCoMo file: expected a JSON list of objects with "
         "'conversation'; it looks like a LongMemEval file: use longmemeval:PATH"),
        ("longmemeval", fixture(LOCOMO), "not a LongMemEval file: expected a JSON list of "
         "objects with 'haystack_sessions'; it looks like a LoCoMo file: use locomo:PATH"),
        ("locomo", {"conversations": []}, "not a LoCoMo file"),
        ("locomo", [], "not a LoCoMo file"),
        ("locomo", lo(lambda d: d[0]["conversation"]["session_2"][1].pop("text")),
         "sample 0 ('demo-1'): conversation.session_2[1]: 'text' is missing"),
        ("locomo", lo(lambda d: d[1]["conversation"].update(session_1="hi")),
         "sample 1 ('demo-2'): conversation: 'session_1' must be a list, got str"),
        ("locomo", lo(lambda d: d[1]["conversation"].pop("session_1_date_time")),
         "sample 1 ('demo-2'): conversation: 'session_1_date_time' is missing"),
        ("locomo", lo(lambda d: d[0]["conversation"]["session_1"][0].update(speaker="Cy")),
         "sample 0 ('demo-1'): conversation.session_1[0]: speaker 'Cy' is neither speaker_a nor "
         "speaker_b"),
        ("locomo", lo(lambda d: d[0]["qa"][1].update(category=7)),
         "sample 0 ('demo-1'): qa[1]: 'category' must be 1 to 5, got 7"),
        ("locomo", lo(lambda d: d[0]["qa"][1].update(answer=None)),
         "sample 0 ('demo-1'): qa[1]: 'answer' must be a string or a number, got NoneType"),
        ("locomo", lo(lambda d: d[0]["qa"][0].update(evidence=[1])),
         "sample 0 ('demo-1'): qa[0]: evidence: must be a list of strings"),
        ("locomo", lo(lambda d: d[1].pop("sample_id")), "sample 1: 'sample_id' is missing"),
        ("locomo", lo(lambda d: d.append("x")), "sample 2: must be an object, got str"),
        ("locomo", lo(lambda d: d[1]["conversation"]["session_1"][1].update(dia_id="D1:1")),
         "conversation 'demo-2', message 'D1:1': duplicate message id"),
        ("longmemeval", lme(lambda d: d[0]["haystack_dates"].pop()),
         "instance 0 ('lme_user_1'): 'haystack_session_ids', 'haystack_dates' and "
         "'haystack_sessions' differ in length (3, 2, 3)"),
        ("longmemeval", lme(lambda d: d[0]["haystack_sessions"][2][1].pop("content")),
         "instance 0 ('lme_user_1'): haystack_sessions[2][1]: 'content' is missing"),
        ("longmemeval", lme(lambda d: d[3]["haystack_session_ids"].__setitem__(1, 9)),
         "instance 3 ('lme_update_3'): haystack_session_ids[1] must be a string, got int"),
        ("longmemeval", lme(lambda d: d[0]["haystack_sessions"][0][0].update(role="x")),
         "conversation 'lme_user_1', message 's_b:1': unknown role 'x'"),
    ],
)  # fmt: skip
def test_bad_files_name_the_file_and_what_is_wrong(
    tmp_path: Path, prefix: str, data: Any, fragment: str
) -> None:
    path = write(tmp_path, data)
    with pytest.raises(DatasetError) as caught:
        load_dataset(f"{prefix}:{path}")
    message = str(caught.value)
    assert message.startswith(f"{prefix}:{path}: ")
    assert fragment in message


def test_a_missing_file_or_bad_json_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read the file"):
        load_dataset(f"locomo:{tmp_path / 'missing.json'}")
    (tmp_path / "broken.json").write_text("[{", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_dataset(f"longmemeval:{tmp_path / 'broken.json'}")


def test_skip_invalid_leaves_out_a_malformed_sample_and_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, lo(lambda d: d[1]["conversation"].pop("speaker_b")))
    dataset, problems = load_dataset(f"locomo:{path}", skip_invalid=True)
    assert [c.id for c in dataset.conversations] == ["demo-1"]
    assert "sample 1 ('demo-2'): conversation: 'speaker_b' is missing" in problems


# -- the command line -------------------------------------------------------------


def test_cli_measures_a_locomo_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["eval", "--dataset", f"locomo:{LOCOMO}", "--strategies", "token_window"]
    result = runner.invoke(app, [*args, "--budgets", "512", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "token_window" in result.stdout and "evidence recall" in result.stdout
    assert "2 conversations, 5 questions" in result.stdout
    assert f"ctxwindow: skipped: locomo:{LOCOMO}: question 'demo-1:q4'" in result.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["n_questions"] == 5
    assert set(results["results"]["token_window"]["512"]["by_category"]) == {
        "single-hop",
        "temporal",
        "multi-hop",
    }


def test_cli_include_unanswerable(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["eval", "--dataset", f"locomo:{LOCOMO}", "--dataset", f"longmemeval:{LONGMEMEVAL}",
         "--strategies", "token_window", "--budgets", "512", "--out", str(out),
         "--include-unanswerable"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["n_conversations"] == 5 and results["n_questions"] == 9
    assert "adversarial" in results["results"]["token_window"]["512"]["by_category"]


def test_cli_bad_benchmark_file_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "--dataset", f"locomo:{LONGMEMEVAL}", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"ctxwindow: error: locomo:{LONGMEMEVAL}: 1 problem(s):")
    assert "use longmemeval:PATH" in result.stderr
    assert "Traceback" not in result.output and not out.exists()


# -- the real LoCoMo development file ---------------------------------------------


@pytest.mark.skipif(
    not LOCOMO_DEV.exists(),
    reason=f"{LOCOMO_DEV} is absent: LoCoMo is CC BY-NC, it is never copied into the repository",
)
def test_locomo_dev_file_gives_the_readme_figures() -> None:
    """5 conversations, 2,760 turns, 758 questions of categories 1-4 (shared/data/README.md)."""
    dataset, notes = load_dataset(f"locomo:{LOCOMO_DEV}")
    assert len(dataset.conversations) == 5
    assert sum(len(c.messages) for c in dataset.conversations) == 2760
    assert dataset.n_questions == 758
    categories = Counter(q.category for c in dataset.conversations for q in c.questions)
    assert categories == {"multi-hop": 141, "temporal": 156, "open-domain": 44, "single-hop": 417}
    dropped = sorted(note.split("'")[1] for note in notes if note.startswith("question"))
    assert dropped == ["conv-26:q31", "conv-26:q47", "conv-42:q59", "conv-42:q89"]
