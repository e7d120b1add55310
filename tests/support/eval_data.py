"""Small evaluation data made in code: a conversation with questions, datasets, broken ones."""

from __future__ import annotations

from typing import Any

from ctxwindow.eval.dataset import parse_dataset


def conversation(cid: str = "c1", turns: int = 20) -> dict[str, Any]:
    """A system prompt and ``turns`` messages; message i says fact i (mixed scripts)."""
    messages: list[dict[str, Any]] = [{"id": "sys", "role": "system", "content": "Be brief."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Fact {i}: the code is K{i:03d}. 事实{i}。日本語{i}。"
        messages.append({"id": f"m{i}", "role": role, "content": text})
    questions = [
        {"id": "early", "question": "What is the code of fact 1?", "answer": "K001",
         "evidence": ["m1"], "category": "single-hop"},
        {"id": "late", "question": "What is the code of fact 18?", "answer": "K018",
         "evidence": ["m18"], "category": "single-hop"},
        {"id": "both", "question": "Codes of facts 2 and 17?", "answer": "K002 K017",
         "evidence": ["m2", "m17"], "category": "multi-hop"},
        {"id": "mid", "question": "What is the code of fact 5?", "answer": "K005",
         "evidence": ["m5"], "after": "m9", "category": "single-hop"},
    ]  # fmt: skip
    return {"id": cid, "messages": messages, "questions": questions}


def dataset(*conversations: dict[str, Any]) -> Any:
    data, problems = parse_dataset({"conversations": list(conversations)}, "test")
    assert problems == []
    return data


def broken(**change: Any) -> dict[str, Any]:
    conv = conversation()
    for path, value in change.items():
        target: Any = conv
        *parents, last = path.split("__")
        for key in parents:
            target = target[int(key) if key.isdigit() else key]
        target[int(last) if last.isdigit() else last] = value
    return conv
