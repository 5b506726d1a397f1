"""Judges: calling, caching, calibrating and trusting the models that grade answers.

    caller.py      ModelJudgeCaller: judge and embedding calls through the run's client, caps, budget and cache
    cache.py       JudgeCache: judge replies and embedding vectors kept, so an unchanged request is not paid twice
    embeddings.py  what an embedding call (`similar`) adds: its request, its reply, its cache key
    calibrate.py   a judge graded on its calibration examples (`engine validate --judges`)
    trust.py       how far a run's judge verdicts can be trusted: the figures analysis reports
    agreement.py   agreement statistics (Cohen's and weighted kappa, Krippendorff's alpha, within one)

The judge kind itself (its options, prompt and grading) stays in the evaluator catalogue, engine.evaluators.judge,
where the registry and the suite loader need it; this package sits above engine.client and below engine.results.
"""
