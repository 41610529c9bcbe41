"""The engines' decode attention against a published FlashInfer 0.6 sweep on an H200 (issue 40, item 2).

Engines whose decode runs FlashInfer 0.2+ or FA3 (SGLang; vLLM V1 on Hopper) price a decode call's K/V at the GEMM
fit's bandwidth plus the fixed kernel cost, ``t_k + x / (e_b B)`` (:func:`lrsim.gpu.engine_vllm.attention`): no
sweep of those kernels was published when the model was built.  ``kernels.json`` "attention" -> "decode" ->
"flashinfer_check" holds one found since (TileOPs' nightly data, batch 1, 32 query / 4 KV heads, L2 flushed).  Its
smallest call is the floor of an isolated launch, which inside an engine's step is ``t_k`` (the FA2 curve's rule),
so the comparable time of a call is ``t_k + T(x) - T(x_0)``.  Printed per point: that time, the model's pricing
for ``model:h200:tp1:sglang`` and, for comparison, what the FA2 2024 curve would give on the H200.

Run: python studies/decode_kernel_check.py   (deterministic, no arguments)
"""

import json

from lrsim.gpu import engine_vllm
from lrsim.gpu.archs import from_config
from lrsim.gpu.kernels import KERNELS_FILE, MIB, decode_excess_s
from lrsim.gpu.synthesize import parse_spec

SPEC = "model:h200:tp1:sglang"
#: the sweep's call: 32 query / 4 KV heads, head_dim 128 (one layer; the rest of the config is not used)
SHAPE = {"model_type": "qwen2", "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 4,
         "hidden_size": 4096, "intermediate_size": 128, "vocab_size": 100}


def rows() -> list[dict]:
    """Per published point: its MiB, the published time, it with the floor replaced by t_k, the model's
    (:func:`lrsim.gpu.engine_vllm.attention`), the FA2 curve's (microseconds)."""
    check = json.loads(KERNELS_FILE.read_text())["attention"]["decode"]["flashinfer_check"]
    s = parse_spec(SPEC).setup(from_config("flashinfer-sweep", SHAPE))
    tk, floor = s.kernel_s * 1e6, check["data"][0][1] * 1e3
    out = []
    for x, ms in check["data"]:
        L = (x - 2 * 32 * 128 * 2) / (4 * 128 * 2 * 2)  # the context: x = L h_kv d 2 2 + 2 H d 2 (fp16, q in, o out)
        out.append({"mib": x / MIB, "published_us": ms * 1e3, "in_step_us": tk + ms * 1e3 - floor,
                    "model_us": float(engine_vllm.attention(s, L - 1, 1.0, 1.0)) * 1e6,  # L - 1 cached + the new one
                    "fa2_curve_us": tk + float(decode_excess_s(x, s.device.hbm_tb_s)) * 1e6})
    return out


def main() -> None:
    print(f"FlashInfer 0.6 batch-1 decode on an H200 (published) against {SPEC}'s pricing, microseconds a call\n")
    print("| K/V + q/o (MiB) | published | published - floor + t_k | model | model / that | FA2 2024 curve |")
    print("|---|---|---|---|---|---|")
    for r in rows():
        print(f"| {r['mib']:.1f} | {r['published_us']:.1f} | {r['in_step_us']:.1f} | {r['model_us']:.1f} | "
              f"{r['model_us'] / r['in_step_us']:.2f} | {r['fa2_curve_us']:.1f} |")


if __name__ == "__main__":
    main()
