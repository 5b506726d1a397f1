"""Python scorers for record.yaml's `python` cases (run in the sandbox, as a suite's scorers.py is)."""


def one_word(answer, transcript, golden, case):
    return len(answer.split()) == 1


def half(answer, transcript, golden, case):
    return 0.5


def explained(answer, transcript, golden, case):
    print("looked at", answer)
    return {"score": float(answer == golden), "reason": f"{answer!r} against {golden!r}"}


def city(answer, transcript, golden, case):
    return transcript["messages"][-1]["content"] == case["city"]


def broken(answer, transcript, golden, case):
    print("about to fail")
    return {"city": "Paris"}["country"]


def hog(answer, transcript, golden, case):
    print("taking 4 GiB")
    return len(bytearray(4 << 30)) > 0


def too_much(answer, transcript, golden, case):
    return 3


def partial_pass(answer, transcript, golden, case):
    """A pass with a partial score, as promptfoo's {pass, score, reason} can say."""
    return {"score": 0.4, "passed": "Paris" in answer, "reason": "mentions Paris, briefly"}
