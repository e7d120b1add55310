"""Words the benchmarks' seeded texts are made of (English, Chinese, Japanese), and the
sentences made of them.

Shared by ``bench_server.py``, ``bench_scale.py`` and ``bench_manager.py`` (imported as
a sibling module: the scripts run from this folder).
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


EN_WORDS = _words(
    "the a and or but if then so because when after before of to in on for with from this "
    "that it we you they is are was be have has do can could will would should not please "
    "thanks sure maybe file function class test error bug fix build release version config "
    "value list string number token window budget message model prompt user reply context "
    "history cache memory time speed query database server client request response status "
    "code line index key path folder branch commit review deploy log metric report table "
    "column row data schema field python docs example question answer idea plan step first "
    "next last again still already just only also good better simple hard small large new "
    "old clear wrong right run read write add remove change update check try use make see "
    "know think want need look find show explain help work start stop keep send"
)
ZH_WORDS = _words(
    "你好 我们 今天 数据 模型 上下文 窗口 问题 请 帮我 翻译 这个 句子 为什么 怎么 可以 "
    "需要 测试 代码 文件 函数 错误 修复 版本 发布 用户 回答 时间 缓存 服务器 请求 日志 配置"
)
JA_WORDS = _words(
    "こんにちは ありがとう 東京 今日は データ モデル です ます について 質問 答え "
    "ファイル 関数 エラー 修正 テスト コード 設定 確認 お願いします 説明 例えば つまり"
)


def sentences(rng: random.Random, n_words: int, emoji: Sequence[str] = ()) -> str:
    """``n_words`` words of seeded text in sentences of 5-12: a quarter of the texts are
    Chinese or Japanese in half their sentences, the rest English; with ``emoji``, one
    sentence in eight is followed by one of them."""
    said: list[str] = []
    words = 0
    cjk = (ZH_WORDS if rng.random() < 0.6 else JA_WORDS) if rng.random() < 0.25 else None
    while words < n_words:
        length = min(n_words - words, rng.randint(5, 12))
        words += length
        if cjk is not None and rng.random() < 0.5:
            said.append("".join(rng.choices(cjk, k=length)) + rng.choice("。？！"))
        else:
            sentence = " ".join(rng.choices(EN_WORDS, k=length))
            said.append(sentence.capitalize() + rng.choice(".?!"))
        if emoji and rng.random() < 0.125:
            said.append(rng.choice(emoji))
    return " ".join(said)
