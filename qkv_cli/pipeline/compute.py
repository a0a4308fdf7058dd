"""compute(request) -> Result: the one way in. Routes to a checkpoint, a batch, a long document's band, or the seeded
pipeline, after checking the cheap things (options, the mask file, the context) before reading the text."""

from __future__ import annotations

from qkv_cli.core.result import Result
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.request import Request


def read_text(req: Request) -> str:
    from qkv_cli.text.inputs import get_text

    return get_text(req.inputs.text, req.inputs.file, req.inputs.default)


def panel_size(req: Request, model=None) -> tuple[int, int] | None:
    """(m queries, n keys) of one layer's panels, from the tokens alone (nothing runs); None where they are not
    known before the run (a batch, a generation, an attribution, an encoder-decoder). A text on stdin is read
    here, once (text.inputs.read_stdin keeps it for the run)."""
    tokens = panel_tokens(req, model)
    return None if tokens is None else (len(tokens[0]), len(tokens[1]))


def panel_tokens(req: Request, model=None):
    """(the queries' Tokens, the keys' Tokens) of one layer's panels, as panel_size counts them; None where they are
    not known before the run."""
    if req.inputs.batch or req.generation.tokens or req.attribution.method is not None:
        return None
    if model is not None and model.is_encoder_decoder:
        return None
    text = read_text(req)
    if model is not None:
        from qkv_cli.pipeline.chat import prompt

        tokens = prompt(model, text, req.inputs.chat).tokens
        return tokens, tokens
    from qkv_cli.text.inputs import get_context
    from qkv_cli.text.tokens import tokenize

    tokenizer = req.settings.tokenizer
    context = get_context(req.inputs.context, req.inputs.context_file, req.inputs.from_stdin)
    tokens = tokenize(text, tokenizer)
    return tokens, tokens if context is None else tokenize(context, tokenizer)


def lines(req: Request) -> list[str]:
    """One sentence per non-empty line of TEXT or --file."""
    from qkv_cli.text.inputs import get_text, sentences

    return sentences(get_text(req.inputs.text, req.inputs.file), "--batch" if req.inputs.batch else "--file")


def extras(req: Request) -> dict:
    """--context / --context-file and --mask-file as keyword arguments of seeded.run, checked cheapest first."""
    from qkv_cli.pipeline.seeded import check_cross
    from qkv_cli.text.inputs import get_context

    check_cross(req.settings, req.inputs.context is not None or req.inputs.context_file is not None)
    out = {}
    if req.inputs.mask_file is not None:
        from qkv_cli.text.maskfile import load_mask_file

        out["allowed"] = load_mask_file(req.inputs.mask_file)
    context = get_context(req.inputs.context, req.inputs.context_file, req.inputs.from_stdin)
    if context is not None:
        out["context"] = context
    return out


def load_model(req: Request):
    from qkv_cli.pipeline import checkpoint

    return checkpoint.load(req.checkpoint.name, req.settings.dtype, req.checkpoint.download, req.limits.max_memory)


def compute(req: Request, model=None, on_token=None, on_layer=None) -> Result:
    """The Result the request describes (see core.result.Kind). on_layer(l, LayerResult): a checkpoint run's
    detailed layers as the forward makes them (views.streaming writes them)."""
    from qkv_cli.pipeline import band, batch, checkpoint, seeded
    from qkv_cli.pipeline.encdec import run as encdec

    s, keep, limits, encdec_of, writes = req.settings, req.keep, req.limits, req.encdec, req.generation.tokens
    if req.attribution.method is not None:
        return attribution(req, model)
    if req.checkpoint.name is not None:
        model = load_model(req) if model is None else model
        if keep.rows is not None and (writes or is_encdec(model)):
            what = "--generate" if writes else f"an encoder-decoder ({model.name})"
            raise QkvError(f"--rows keeps query rows of a decoder or encoder's forward pass, not of {what}")
        if not writes and (encdec_of.target is not None or encdec_of.attention is not None or is_encdec(model)):
            encdec.check_model(model, encdec_of.target, encdec_of.attention)
            encdec.check_options(model, req)
            return encdec.run(model, read_text(req), encdec_of.target, encdec_of.attention or "cross", keep.layers,
                              keep.all_layers, s, limits.max_memory, limits.output)  # fmt: skip
        if writes:
            return generation(req, model, on_token)
        run = checkpoint.run(model, read_text(req), keep.layers, keep.all_layers, s.kernel, limits.max_memory,
                             chat=req.inputs.chat, rows=keep.rows, narrow=keep.narrow, heads=keep.heads,
                             output=limits.output, on_layer=on_layer)  # fmt: skip
        if req.readout.predict or req.readout.logit_lens:
            from qkv_cli.pipeline.predict import predict

            run.predictions = predict(model, run, lens=req.readout.logit_lens)
        return run
    more = extras(req)
    if req.inputs.batch:
        if more:
            used = " and ".join(x for x, k in (("--context", "context"), ("--mask-file", "allowed")) if k in more)
            raise QkvError(
                f"--batch cannot be combined with {used}: every sentence has its own length; run them one at a time"
            )
        return batch.run_batch(lines(req), s, req.limits.max_memory, req.limits.output)
    text = read_text(req)
    if req.keep.band and s.window is not None and s.chunk is None and not more and s.ablate is None:
        return band.run(text, s, max_memory=req.limits.max_memory, output=req.limits.output)
    return seeded.run(text, s, max_memory=req.limits.max_memory, output=req.limits.output, **more)


def attribution(req: Request, model=None) -> Result:
    """qkv attribute / heatmap --method: rollout, value norms or value zeroing (pipeline.attribution)."""
    from qkv_cli.pipeline import attribution as method
    from qkv_cli.pipeline import seeded

    method.check(req)
    if req.checkpoint.name is None:
        return method.of_layer(
            seeded.run(read_text(req), req.settings, max_memory=req.limits.max_memory, **extras(req)), req
        )
    model = load_model(req) if model is None else model
    if req.encdec.target is not None or req.encdec.attention is not None or is_encdec(model):
        from qkv_cli.pipeline.encdec.inspection import attribute

        return attribute(model, read_text(req), req)
    return method.of_model(model, read_text(req), req)


def generation(req: Request, model, on_token=None) -> Result:
    """The model writes req.generation.tokens tokens after the text (wrapped in its chat template with
    req.inputs.chat); a decoder calls on_token(ids written so far) after each one (pipeline.generate)."""
    from qkv_cli.pipeline import chat
    from qkv_cli.pipeline.generate import generate
    from qkv_cli.pipeline.output_plan import check_generation

    text, g = read_text(req), req.generation
    if is_encdec(model):
        from qkv_cli.pipeline.encdec import run as encdec

        encdec.check_options(model, req)
        if req.limits.output is not None:  # its JSON holds each step's cross-attention over the source
            check_generation(req.limits.output, model, g.tokens, len(model.tokenize(text)))
        return encdec.generate(model, text, g.tokens, req.limits.max_memory)
    said = chat.prompt(model, text, req.inputs.chat)
    check_generation(req.limits.output, model, g.tokens)
    out = generate(model, said.tokens, g.tokens, g.temperature, g.top_k, g.seed, req.settings.kernel,
                   req.limits.max_memory, eos=model.config.eos, progress=g.progress, on_token=on_token)  # fmt: skip
    out.chat = said if req.inputs.chat is not None else None
    return out


def is_encdec(model) -> bool:  # an encoder-decoder checkpoint (models.encdec_model)
    return model is not None and model.is_encoder_decoder


def compute_each(req: Request) -> list[Result]:
    """One Result per line of --file (one sentence per line), or one Result for TEXT (qkv heads). Every Result is
    kept, so the budget counts all of them before the first runs."""
    from qkv_cli.core import budget
    from qkv_cli.pipeline import checkpoint, seeded

    if req.inputs.induction_probe:
        return [induction_probe(req)]
    texts = lines(req) if req.inputs.file is not None and req.inputs.text is None else [read_text(req)]
    limit = budget.default_max_memory() if req.limits.max_memory is None else req.limits.max_memory
    if req.checkpoint.name is not None:
        from qkv_cli.models import estimate_bytes
        from qkv_cli.pipeline.chat import prompt

        model = load_model(req)
        if req.encdec.target is not None or req.encdec.attention is not None or is_encdec(model):
            from qkv_cli.pipeline.encdec.inspection import each

            return each(model, texts, req)
        sizes = [len(prompt(model, t, req.inputs.chat).tokens) for t in texts]
        kept = sum(model.config.n_layers * model.config.n_heads * m * m * model.dtype.itemsize for m in sizes)
        peak = max(estimate_bytes(model.config, m, model.dtype) for m in sizes)
        checkpoint.check_memory(model, kept + peak, limit, "fewer or shorter lines, or --dtype float32")
        return [checkpoint.run(model, t, kernel=req.settings.kernel, max_memory=req.limits.max_memory, detail=False,
                               chat=req.inputs.chat) for t in texts]  # fmt: skip
    more = extras(req)
    if len(texts) > 1:
        from qkv_cli.text.tokens import tokenize

        total = sum(seeded.estimate(len(tokenize(t, req.settings.tokenizer)), req.settings) for t in texts)
        budget.check_budget(total, limit, f"fewer or shorter lines, or {seeded.HINTS}",
                            dtype=req.settings.dtype)  # fmt: skip
    return [seeded.run(t, req.settings, max_memory=req.limits.max_memory, **more) for t in texts]


def induction_probe(req: Request) -> Result:
    """qkv heads --induction-probe N: the checkpoint on N seeded random tokens repeated twice (pipeline.probe)."""
    from qkv_cli.pipeline import probe

    if req.checkpoint.name is None:
        raise QkvError("--induction-probe needs --model: it draws tokens from a real checkpoint's vocabulary")
    if req.inputs.text is not None or req.inputs.file is not None or req.inputs.chat is not None:
        raise QkvError("--induction-probe makes its own text: drop TEXT, --file and --chat")
    model = load_model(req)
    if is_encdec(model):
        raise QkvError(f"--induction-probe runs a decoder or an encoder on repeated tokens: {model.name} is an "
                       "encoder-decoder; give TEXT and --attention encoder or decoder")  # fmt: skip
    return probe.run(model, req.inputs.induction_probe, req.settings.seed, req.settings.kernel, req.limits.max_memory)
