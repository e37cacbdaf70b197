"""Every built-in mechanism written again in numpy float64, from its paper's formula and
not from attnlab's code, with the float32 error bound the tests compare against.

For one query row ``q [d]`` and keys ``k [n, d]`` at the mechanism's initial scalars:
``reference_logits`` gives ``z [n]``, ``reference_weights`` the weights ``p [n]``,
``reference_jacobian`` ``dp/dz`` by central differences (independent of both softmax's
closed form and autodiff), and ``row_reference`` the card's five statistics;
``row_statistic_bounds`` bounds one float32 evaluation of a softmax row's statistics.
Decoders: ``decoder_reference`` (the Llama family), ``numpy_gpt2``, ``log_softmax64``.
"""

from __future__ import annotations

import math

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
#: float32's smallest normal number (a weight below it may flush to zero).
TINY32 = float(np.finfo(np.float32).tiny)
#: XLA's float32 exp and log, and the normal sampler's transform, are accurate to a few
#: ulp; we allow 4 eps each.
ULPS = 4
#: The l2-normalisation's epsilon (``x / sqrt(|x|^2 + 1e-6)``, QK-norm and cosine).
L2_EPS = 1e-6
#: Softpick's epsilon in the denominator.
SOFTPICK_EPS = 1e-8
#: Central-difference step: truncation ~h^2 |p'''| and rounding ~1e-16 / h, both < 1e-9.
FD_STEP = 1e-5


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def reference_logits(name: str, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``z_j`` of the built-in ``name`` for query ``q [d]`` and keys ``k [n, d]``."""
    d, n = q.shape[-1], k.shape[0]
    dot = k @ q
    cosine = _normalise(k) @ _normalise(q)
    return {
        "scaled": dot / math.sqrt(d),
        "unscaled": dot,
        "folded_init": dot,  # the fold acts on W_Q and W_K, not on given q and k
        "qk_norm": math.sqrt(d) * cosine,
        "learned_temperature": dot / math.sqrt(d),
        "inv_d": dot / d,
        "softcap30": 30.0 * np.tanh(dot / 30.0),
        "softcap50": 50.0 * np.tanh(dot / 50.0),
        "ssmax": 0.43 * math.log(n) * dot / math.sqrt(d),
        "sigmoid": dot / math.sqrt(d) - math.log(n),
        "softpick": dot / math.sqrt(d),
        "cosine_tau": 10.0 * cosine,  # 1 / tau = exp(log 10) at initialisation
        "gated": dot / math.sqrt(d),  # the gate acts on the output, after the weights
        "sink": dot / math.sqrt(d),
    }[name]


def reference_weights(name: str, z: np.ndarray) -> np.ndarray:
    """The weights of logits ``z [n]``: softmax, or sigmoid's, softpick's or the sink's rule."""
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "softpick":
        e = np.expm1(z)
        return np.maximum(e, 0.0) / (np.sum(np.abs(e)) + SOFTPICK_EPS)
    if name == "sink":  # gpt-oss: softmax over [z, s] without the sink's column, s = 0
        m = max(z.max(), 0.0)
        e = np.exp(z - m)
        return e / (e.sum() + np.exp(-m))
    e = np.exp(z - z.max())
    return e / e.sum()


def reference_jacobian(name: str, z: np.ndarray) -> np.ndarray:
    """``dp_i/dz_j`` by central differences in float64."""
    columns = []
    for j in range(z.shape[0]):
        step = np.zeros_like(z)
        step[j] = FD_STEP
        up, down = reference_weights(name, z + step), reference_weights(name, z - step)
        columns.append((up - down) / (2 * FD_STEP))
    return np.stack(columns, axis=1)


def row_reference(name: str, q: np.ndarray, k: np.ndarray) -> dict[str, float]:
    """The card's statistics of one row: max weight, entropy of the normalised row, mass,
    ``|dp/dz|_F`` and the logits' std (ddof 0)."""
    z = reference_logits(name, q, k)
    p = reference_weights(name, z)
    r = p / p.sum()
    nonzero = r[r > 0]
    return {
        "max_weight": float(p.max()),
        "entropy": float(-np.sum(nonzero * np.log(nonzero))),
        "mass": float(p.sum()),
        "jacobian_fro": float(np.linalg.norm(reference_jacobian(name, z))),
        "logit_std": float(np.std(z)),
    }


def multiplier(name: str, d: int, n: int) -> float:
    """The factor between the (normalised) dot product and the logits at initialisation."""
    return {
        "scaled": 1 / math.sqrt(d),
        "learned_temperature": 1 / math.sqrt(d),
        "sigmoid": 1 / math.sqrt(d),
        "softpick": 1 / math.sqrt(d),
        "gated": 1 / math.sqrt(d),
        "sink": 1 / math.sqrt(d),
        "inv_d": 1 / d,
        "ssmax": 0.43 * math.log(n) / math.sqrt(d),
        "qk_norm": math.sqrt(d),
        "cosine_tau": 10.0,
    }.get(name, 1.0)


def float32_bound(name: str, q: np.ndarray, k: np.ndarray) -> float:
    """An upper bound on any statistic's float32 error for this row, from first-order
    perturbation theory: the logits' rounding ``dz`` (a d-term dot product: Higham's
    ``gamma_d = d eps / (1 - d eps)`` times ``sum_i |q_i k_ji|`` times the multiplier, with
    ``|z| eps`` for the tanh, log and normalisation that follow), amplified by the weights'
    conditioning ``|dp/dz|_F sqrt(n)``, plus ``(n + 8) eps`` per unit of the statistics'
    size for the reductions (sum, max, log) over the row. The entropy's sensitivity is at
    most ``(1 + |log p_min|)`` times that of the weights; the bound carries that factor
    for every statistic."""
    d, n = q.shape[-1], k.shape[0]
    gamma = d * EPS32 / (1 - d * EPS32)
    z = reference_logits(name, q, k)
    dots = np.abs(k) @ np.abs(q)
    if name in ("qk_norm", "cosine_tau"):  # unit vectors; the normalisation adds ~d eps
        dots = np.abs(_normalise(k)) @ np.abs(_normalise(q)) + 2 * gamma
    dz = gamma * np.max(dots) * multiplier(name, d, n) + 4 * EPS32 * (np.max(np.abs(z)) + 1)
    p = reference_weights(name, z)
    conditioning = np.linalg.norm(reference_jacobian(name, z)) * math.sqrt(n)
    log_factor = 1.0 + abs(math.log(max(p[p > 0].min() / p.sum(), 1e-300)))
    size = max(1.0, float(np.max(np.abs(z))), float(p.sum()))
    return log_factor * (conditioning * dz + (n + 8) * EPS32 * size)


# --- Llama-family decoders in float64, from Hugging Face's modeling files (modeling_llama,
# modeling_qwen3, modeling_olmo2, modeling_gemma2, modeling_gemma3), reading config.json's
# keys directly: nothing of attnlab.models is used.


def _rms(x: np.ndarray, w: np.ndarray, eps: float, gemma: bool) -> np.ndarray:
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w) if gemma else y * w


def _inv_freq(raw: dict, params: dict | None, theta: float, dim: int) -> np.ndarray:
    """``_compute_default/linear/llama3/yarn_parameters`` of transformers' rope utils."""
    params = params or {}
    theta = params.get("rope_theta", theta)
    inv = 1.0 / theta ** (np.arange(0, dim, 2) / dim)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "linear":
        return inv / params["factor"]
    old = params.get("original_max_position_embeddings", raw["max_position_embeddings"])
    if kind == "llama3":
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                out.append(f)
            elif wavelen > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return np.asarray(out)
    if kind == "yarn":
        factor = params["factor"]

        def dim_of(rotations: float) -> float:
            return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        lo = max(math.floor(dim_of(params.get("beta_fast", 32))), 0)
        hi = min(math.ceil(dim_of(params.get("beta_slow", 1))), dim - 1)
        ramp = np.clip((np.arange(dim // 2) - lo) / ((hi + 0.001 if lo == hi else hi) - lo), 0, 1)
        return inv / factor * ramp + inv * (1 - ramp)
    return inv


def _yarn_factor(params: dict | None) -> float:
    params = params or {}
    if params.get("rope_type", params.get("type")) != "yarn":
        return 1.0
    return params.get("attention_factor") or 0.1 * math.log(params["factor"]) + 1.0


def decoder_reference(tensors: dict, raw: dict, ids: np.ndarray, drop: str = "") -> np.ndarray:
    """Next-token logits ``[B, T, V]`` in float64 of a Llama, Qwen3, OLMo 2, Gemma 2 or
    Gemma 3 checkpoint's ``tensors`` and ``config.json`` ``raw``, Gemma's sliding layers
    (Gemma 2: the even ones; Gemma 3: all but every ``sliding_window_pattern``-th) seeing
    the last ``sliding_window`` keys. ``drop`` removes one family's distinguishing feature, to show
    that it matters: ``"rope_scaling"``, ``"qk_norm"``, ``"full_width_qk_norm"`` (OLMo 2's
    norm applied per head instead), ``"one_plus_w"``, ``"query_pre_attn_scalar"`` (the
    head_dim divisor instead), ``"softcap"``, ``"local_rope"`` (Gemma 3's sliding layers at
    the global base and scaling), ``"sliding_window"`` (every layer sees every earlier key)."""
    t = {k: np.asarray(v, np.float64) for k, v in tensors.items()}
    kind = raw["model_type"]
    gemma = kind.startswith("gemma") and drop != "one_plus_w"
    is_gemma = kind.startswith("gemma")
    H = raw["num_attention_heads"]
    KV = raw.get("num_key_value_heads", H)
    D = raw["hidden_size"]
    d = raw.get("head_dim") or D // H
    eps = raw.get("rms_norm_eps", 1e-6)
    B, T = ids.shape
    x = t["model.embed_tokens.weight"][ids]
    if is_gemma:
        x = x * math.sqrt(D)
    scale = d**-0.5
    if is_gemma and drop != "query_pre_attn_scalar":
        scale = raw.get("query_pre_attn_scalar", 256) ** -0.5
    cap = raw.get("attn_logit_softcapping") if drop != "softcap" else None
    for i in range(raw["num_hidden_layers"]):
        p = f"model.layers.{i}."

        def norm(y, name, p=p):
            return _rms(y, t[f"{p}{name}.weight"], eps, gemma)

        a = x if kind == "olmo2" else norm(x, "input_layernorm")
        q = a @ t[f"{p}self_attn.q_proj.weight"].T
        k = a @ t[f"{p}self_attn.k_proj.weight"].T
        v = a @ t[f"{p}self_attn.v_proj.weight"].T
        if kind == "olmo2" and drop not in ("qk_norm", "full_width_qk_norm"):
            q, k = norm(q, "self_attn.q_norm"), norm(k, "self_attn.k_norm")
        q = q.reshape(B, T, H, d).transpose(0, 2, 1, 3)
        k = k.reshape(B, T, KV, d).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, KV, d).transpose(0, 2, 1, 3)
        if kind == "olmo2" and drop == "full_width_qk_norm":  # per head: a wrong reading
            q = _rms(q, t[f"{p}self_attn.q_norm.weight"].reshape(H, 1, d), eps, False)
            k = _rms(k, t[f"{p}self_attn.k_norm.weight"].reshape(KV, 1, d), eps, False)
        if kind in ("qwen3", "gemma3_text") and drop != "qk_norm":
            q, k = norm(q, "self_attn.q_norm"), norm(k, "self_attn.k_norm")
        params = raw.get("rope_scaling")
        theta = raw.get("rope_theta", 10000.0)
        if (
            kind == "gemma3_text"
            and (i + 1) % raw.get("sliding_window_pattern", 6)
            and (drop != "local_rope")
        ):
            params, theta = None, raw.get("rope_local_base_freq", 10000.0)
        if drop == "rope_scaling":
            params = None
        inv = _inv_freq(raw, params, theta, d)
        angles = np.outer(np.arange(T), inv)
        cos = np.concatenate([np.cos(angles)] * 2, -1) * _yarn_factor(params)
        sin = np.concatenate([np.sin(angles)] * 2, -1) * _yarn_factor(params)

        def rope(y, cos=cos, sin=sin):
            y1, y2 = y[..., : d // 2], y[..., d // 2 :]
            return y * cos + np.concatenate([-y2, y1], -1) * sin

        q, k = rope(q), rope(k)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        z = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
        if cap:
            z = cap * np.tanh(z / cap)
        allowed = np.tril(np.ones((T, T), bool))
        pattern = raw.get("sliding_window_pattern", 6)
        sliding = (kind == "gemma2" and i % 2 == 0) or (kind == "gemma3_text" and (i + 1) % pattern)
        if sliding and drop != "sliding_window":
            allowed &= np.subtract.outer(np.arange(T), np.arange(T)) < raw["sliding_window"]
        z = np.where(allowed, z, -np.inf)
        w = np.exp(z - z.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
        out = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, H * d) @ t[
            f"{p}self_attn.o_proj.weight"
        ].T
        if kind == "olmo2" or is_gemma:
            out = norm(out, "post_attention_layernorm")
        x = x + out
        h = x
        if is_gemma:
            h = norm(x, "pre_feedforward_layernorm")
        elif kind != "olmo2":
            h = norm(x, "post_attention_layernorm")
        g = h @ t[f"{p}mlp.gate_proj.weight"].T
        if is_gemma:
            g = 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
        else:
            g = g / (1 + np.exp(-g))
        m = (g * (h @ t[f"{p}mlp.up_proj.weight"].T)) @ t[f"{p}mlp.down_proj.weight"].T
        if kind == "olmo2" or is_gemma:
            m = norm(m, "post_feedforward_layernorm")
        x = x + m
    x = _rms(x, t["model.norm.weight"], eps, gemma)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    logits = x @ head.T
    final = raw.get("final_logit_softcapping")
    return final * np.tanh(logits / final) if final and drop != "softcap" else logits


#: Sign patterns of the float64 sensitivity estimate (``decoder_float32_bound``).
DRAWS = 3
#: First-order bounds hold for the worst signs; random signs reach a fraction of that: the
#: bound is this many times the largest response seen.
SAFETY = 8.0


def decoder_float32_bound(tensors: dict, raw: dict, ids: np.ndarray) -> float:
    """A float32 decoder forward's error bound on the logits of ``ids``: a float32 dot
    product of length ``n`` is the exact one of inputs perturbed by at most ``gamma_n = n
    eps32`` relatively (Higham 2002, sec. 3.5: backward error); the float64 forward's
    (``decoder_reference``) response to every weight perturbed so (random signs, the largest
    of ``DRAWS``) is the conditioning, times ``SAFETY``; ``n`` the longest contraction (a
    linear layer's widest side, or the row's keys; the embedding and head, whose rows are
    read or dotted with a hidden state, not contracted over the vocabulary); the nonlinear
    steps (exp, tanh, rsqrt) add a relative eps32 each, well inside ``gamma_n``."""
    linear = [v for k, v in tensors.items() if v.ndim == 2 and not k.endswith(VOCABULARY_TABLES)]
    widest = max([ids.shape[1], *(max(v.shape) for v in linear)])
    gamma = widest * EPS32
    base = decoder_reference(tensors, raw, ids)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(DRAWS):
        moved = {k: v * (1 + gamma * rng.choice([-1.0, 1.0], v.shape)) for k, v in tensors.items()}
        worst = max(worst, float(np.abs(decoder_reference(moved, raw, ids) - base).max()))
    return SAFETY * worst


#: A decoder's tensors over its vocabulary.
VOCABULARY_TABLES = ("embed_tokens.weight", "lm_head.weight")


def numpy_gpt2(t: dict[str, np.ndarray], config: dict, ids: np.ndarray) -> np.ndarray:
    """GPT-2 as Hugging Face's ``GPT2LMHeadModel`` reads ``config`` (causal attention divided
    by ``sqrt(d_head)`` where ``scale_attn_weights``, default true; ``layer_norm_epsilon``,
    default 1e-5; tanh GELU for ``gelu_new``, erf for ``gelu``; the head ``lm_head.weight``
    if ``t`` has it, else tied) in float64 numpy, ``[B, T, V]``, from tensors by GPT-2's
    names. Independent of attnlab's code."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    D, H = config["n_embd"], config["n_head"]
    d, T = D // H, ids.shape[1]
    eps = config.get("layer_norm_epsilon", 1e-5)
    divisor = math.sqrt(d) if config.get("scale_attn_weights", True) else 1.0

    def ln(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * t[f"{name}.weight"] + t[f"{name}.bias"]

    def gelu(x):
        if config.get("activation_function", "gelu_new") == "gelu":
            return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    x = t["wte.weight"][ids] + t["wpe.weight"][:T]
    for i in range(config["n_layer"]):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (y.reshape(*ids.shape, H, d).transpose(0, 2, 1, 3) for y in np.split(qkv, 3, -1))
        z = q @ k.transpose(0, 1, 3, 2) / divisor
        z = np.where(np.tril(np.ones((T, T), bool)), z, -np.inf)
        w = np.exp(z - z.max(-1, keepdims=True))
        o = (w / w.sum(-1, keepdims=True)) @ v
        x = x + o.transpose(0, 2, 1, 3).reshape(x.shape) @ t[p + "attn.c_proj.weight"]
        x = x + t[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        x = x + h @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ t.get("lm_head.weight", t["wte.weight"]).T


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64 numpy (the references' next-token log
    probabilities)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def row_statistic_bounds(z, z_abs, scale: float, d_k: int) -> np.ndarray:
    """``[statistic, trial]`` bounds on the error of one float32 evaluation of the row
    statistics of ``softmax(scale z)`` (``z``, ``z_abs`` from test_sampling's ``direct_draws``).

    Logits: the d_k-term product, the draws' transform (ULPS each for q and k) and the
    scale: (d_k + 2 ULPS + 2) EPS32 of scale |K| |q|. Weights: logit errors within +-M move
    p_i by <= p_i (1 - p_i) expm1(2M); the softmax rounds z - max (EPS32 |z - max|), exp, the
    n-term sum and the division (2), and may flush weights below TINY32. Statistics: the max
    moves by at most the largest weight error; the entropy by sum |ln p + 1| dp plus its own
    rounding; the norm by twice the weights' largest relative error plus 4 n EPS32."""
    n = z.shape[-1]
    e_z = (d_k + 2 * ULPS + 2) * EPS32 * abs(scale) * z_abs
    x = scale * z
    gap = x.max(-1, keepdims=True) - x
    p = np.exp(-gap) / np.exp(-gap).sum(-1, keepdims=True)
    big_m = e_z.max(-1, keepdims=True)
    e_p = p * (1 - p) * np.expm1(2 * big_m) + p * (gap + ULPS + n + 2) * EPS32 + TINY32
    entropy = -np.sum(p * np.log(p), -1)
    e_entropy = np.sum(np.abs(np.log(p) + 1) * e_p, -1) + (n + ULPS + 1) * EPS32 * entropy
    s2 = np.sum(p**2, -1, keepdims=True)
    frobenius = np.sqrt(np.sum(p**2 * ((1 - p) ** 2 + s2 - p**2), -1))
    e_frobenius = (2 * np.max(e_p / p, -1) + 4 * n * EPS32) * frobenius
    return np.stack([e_p.max(-1), e_entropy, e_frobenius])
