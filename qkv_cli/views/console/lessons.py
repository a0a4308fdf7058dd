"""`qkv learn`: the seven textbook questions about Q, K and V, each a live qkv command and what to read in it.

The lessons are data: a question, the commands that answer it (run live by the CLI, never pasted), and two
sentences on what to look at in the output. Light on purpose: no numpy, no rich."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.errors import QkvError

SENTENCE = "The cat sat on the mat because it was warm."
TRANSLATION = {  # question 7 on a translation model: which of the cross-attention's Q, K, V carries the source word
    "clean": "translate English to French: The cat is sleeping.",
    "corrupted": "translate English to French: The dog is sleeping.",
    "target": "Le", "answer": "chat", "wrong": "chien", "what": ("q", "k", "v"), "side": "cross",
}  # fmt: skip
CARRIES = 0.5  # V is said to carry the word when one head's V restores at least this share of the answer ...
MARGIN = 2.0  # ... and at least this many times what the best Q or K patch restores


@dataclass(frozen=True)
class Lesson:
    number: int
    question: str
    commands: tuple[tuple[str, ...], ...]  # each one qkv command's arguments, without the leading `qkv`
    reading: str  # two sentences: what to read in the output
    patching: dict | None = None  # a live qkv patch on an encoder-decoder the user names (qkv learn N --model M)


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        1,
        "For 30 tokens of 512-dimensional vectors, what are the dimensions of V?",
        (("shapes", "--d", "512", "--tau", "8", "--m", "30"),),
        "With tau = 8 heads each head's V^[j] = H W_j^v is m x d_k = 30 x 64 (d_k = d / tau = 512 / 8), and the "
        "`x8` column says there are eight of them. Concatenated, the heads are 30 x 512 again, and W^o (512 x 512) "
        "maps them back to the model width.",
    ),
    Lesson(
        2,
        "How are Q, K and V computed from the input?",
        (("explain", "the cat sat", "--query", "2", "--causal"),),
        "Each key t gets the dot product q_2 . k_t, times the scale 1/sqrt(d_k), plus its Mask entry; the softmax "
        "of those scores gives alpha_2,t. The head's output for query 2 is the weighted sum of the rows of V, "
        "each term shown: run `qkv explain` without --query for every step from H to the output.",
    ),
    Lesson(
        3,
        "What do the learned projections buy over comparing the raw vectors?",
        (("heads", SENTENCE, "--d", "64", "--tau", "2", "--projection", "identity"),),
        "With identity projections Q = K = V are slices of H, so a token's score with itself, |h_i|^2, beats every "
        "other score: both heads come out as `self` (self share near 1). Learned (here: random, "
        "`--projection random`) projections compare a query view with a different key view, so a token can attend "
        "elsewhere.",
    ),
    Lesson(
        4,
        "Why divide by sqrt(d_k)?",
        tuple(("heads", SENTENCE, "--d", "512", "--tau", "2", "--scale", s) for s in ("auto", "none", "sqrt")),
        "Two d_k-dimensional vectors with unit-variance entries have a dot product of variance d_k, so at d_k = 256 "
        "the unscaled scores (`--scale none`) saturate the softmax: entropy near 0, max weight near 1. The `grad` "
        "column, sum alpha (1 - alpha), falls to 0 with it, so no gradient would reach Q and K; `--scale sqrt`, "
        "the misprint that multiplies, is worse still.",
    ),
    Lesson(
        5,
        "What do the causal mask and the sliding window change?",
        (("mask", "--causal", "--window", "3"),),
        "`C` marks the keys after the query (the causal mask, V_<=i) and `W` the keys older than the n_c = 3 most "
        "recent (the window, V_[i-n_c+1, i]); each removed cell is -inf in the Mask, so its weight is exactly 0. "
        "Every row keeps at most n_c keys, which is why a window makes long texts cost O(m n_c) instead of O(m^2).",
    ),
    Lesson(
        6,
        "Self- vs cross-attention: where do Q, K and V come from?",
        (
            (
                "run",
                "the cat sat",
                "--context",
                "le chat dort",
                "--d",
                "8",
                "--tau",
                "2",
                "--head",
                "0",
                "--show",
                "q,k,weights",
            ),
        ),  # fmt: skip
        "The rows of Q^[0] are the text's tokens, the rows of K^[0] the context's: Q = X W^q, K = Y W^k, "
        "V = Y W^v. The weights are m x n, queries from one text and keys from the other; self-attention is the "
        "case X = Y.",
    ),
    Lesson(
        7,
        "The weights highlight the right words but the output carries no meaning: which matrix is to blame?",
        (
            (
                "run",
                "the cat sat",
                "--d",
                "8",
                "--tau",
                "2",
                "--head",
                "0",
                "--show",
                "weights,output",
                "--ablate",
                "v",
            ),
        ),  # fmt: skip
        "Zeroing V changes the output but leaves Q, K, the scores and the weights exactly as they were "
        "(`unchanged: Q, K, scores, weights`): V only enters the output. So weights that look right say nothing "
        "about whether the values carry meaning: blame W^v (or W^o), never the weights.",
        TRANSLATION,
    ),
)


def lesson(number: int) -> Lesson:
    for item in LESSONS:
        if item.number == number:
            return item
    raise QkvError(f"no lesson {number}: the lessons are 1..{len(LESSONS)} (qkv learn --list)")


def command_line(args: tuple[str, ...]) -> str:
    """The command as a user would type it, quoted for a POSIX shell."""
    import shlex

    return "qkv " + " ".join(shlex.quote(a) for a in args)


def listing() -> str:
    lines = [f"{item.number}. {item.question}" for item in LESSONS]
    lines.append("")
    lines.append("qkv learn N runs lesson N; qkv learn runs them all.")
    return "\n".join(lines)


def reading(item: Lesson, width: int) -> str:
    """What to read in the output, wrapped to the terminal's width."""
    import textwrap

    return textwrap.fill(f"What to read: {item.reading}", width=max(40, min(width, 100)))


def heading(item: Lesson) -> str:
    return f"Question {item.number} of {len(LESSONS)}: {item.question}"


def patch_line(item: Lesson, model: str) -> str:
    """The `qkv patch` command a lesson's live patching run is, as a user would type it."""
    p = item.patching
    args = ["patch", p["clean"], p["corrupted"], "--model", model, "--target", p["target"], "--answer", p["answer"],
            "--wrong", p["wrong"], "--attention", p["side"]]  # fmt: skip
    args += [a for w in p["what"] for a in ("--what", w)]
    return command_line((*args, "--top", "6"))


def no_model(item: Lesson, width: int) -> str:
    """What question 7 says without --model: how to run its patching on a translation checkpoint."""
    import textwrap

    text = (f"Live patching: name an encoder-decoder checkpoint to patch its cross-attention's Q, K and V head by "
            f"head, e.g. `qkv learn {item.number} --model google-t5/t5-small` (a translation model; fetch it once "
            "with `qkv run hello --model google-t5/t5-small --download`). qkv ships no translation weights, so "
            "nothing is claimed here without one.")  # fmt: skip
    return textwrap.fill(text, width=max(40, min(width, 100)))


def verdict(p, width: int) -> str:
    """What the live patching measured: each of Q, K, V's best single-head recovery, and that V carries the source
    word only when the numbers say so (V's best at least CARRIES and MARGIN times Q's and K's)."""
    import textwrap

    best = {w: float(p.recovery[w].max()) for w in ("q", "k", "v")}
    said = f"one head's V restores up to {best['v']:.2f} of the answer, one head's K {best['k']:.2f}, Q {best['q']:.2f}"
    answer, wrong = p.answer[1], p.wrong[1]
    if not p.metric_clean > 0 > p.metric_corrupted:  # the model must translate the word before anything carries it
        text = (f"On {p.model}, the clean source does not give {answer!r} over {wrong!r} while the corrupted one "
                f"gives {wrong!r} (logit differences {p.metric_clean:.3f} and {p.metric_corrupted:.3f}): it does not "
                "translate the word, so no head can be said to carry it, and nothing is claimed.")  # fmt: skip
    elif best["v"] >= CARRIES and best["v"] >= MARGIN * max(best["q"], best["k"], 0.0):
        text = (f"On {p.model}, {said}: here V carries the source word into the translation, while Q (the "
                "decoder's queries) and K (the source's keys) only decide where to look.")  # fmt: skip
    else:
        text = (f"On {p.model}, {said}: these numbers do not single out V, so this model does not show it (V "
                f"would need at least {CARRIES} and {MARGIN:g} times the best Q or K).")  # fmt: skip
    return textwrap.fill(f"What the patching measured: {text}", width=max(40, min(width, 100)))
