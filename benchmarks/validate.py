"""tierlab's predictions beside published measurements: a table with the ratio and the reason for each gap.

    python benchmarks/validate.py            # the table (text)
    python benchmarks/validate.py --json     # the same rows as JSON

Each row is one published figure (source, URL, date in ``MEASURED``) and what tierlab predicts for the
same setup: the roofline bound (``per_token.latency_s``) and the calibrated latency
(``per_token.latency_calibrated_s``: the preset chip's achievable fractions, kernel overhead and
fusion, :mod:`tierlab.cost.organisation`), energy per token, or the capacity plan. ``ratio`` =
predicted / measured (calibrated where there is one); ``within_25`` says whether it is within ±25 %; ``aim`` marks the rows the ±25 % aim is
for (batch-1 decode on GPUs by compiled code with CUDA graphs).
The chip presets were calibrated on microbenchmarks only (HBM stream/reduction bandwidth, kernel
launch cost), never on the end-to-end figures below, so every row is a validation, not a fit.

Setups: batch-1 decode at the benchmarks' short contexts (torchao/gpt-fast ``generate.py``: a few
prompt tokens then 200 generated, so ~100 tokens in context on average; ChatGLM2's "2000 tokens at
max length 2048", ~1000 on average), bf16 weights and KV, one decode step averaged over two.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:          # runnable from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tierlab.common.errors import UsageError  # noqa: E402

TORCHAO = ("pytorch/ao torchao/quantization/README.md, 'Benchmarks' tables (CUDA backend, NVIDIA-A100-80GB GPU "
           "and NVIDIA-H100 GPU; torchao/_models/llama/generate.py, torch.compile, batch 1)",
           "https://github.com/pytorch/ao/blob/main/torchao/quantization/README.md", "2024-2025 (read 2026-12-01)")
GPTFAST = ("pytorch-labs/gpt-fast README.md, benchmark table (8xA100-80GB power-limited to 330 W, one GPU, "
           "torch.compile, batch 1)", "https://github.com/pytorch-labs/gpt-fast", "2023-11 (read 2026-12-01)")
CHATGLM2 = ("THUDM/ChatGLM2-6B README_EN.md, 'Inference Efficiency' (official implementation, batch 1, max "
            "length 2048, bf16, A100-SXM-80G, PyTorch 2.0) and its INT4/FP16 memory table",
            "https://github.com/THUDM/ChatGLM2-6B/blob/main/README_EN.md", "2023-06 (read 2026-12-01)")
MLENERGY = ("ML.ENERGY blog 'LLM Inference Energy: A Longitudinal Analysis' (leaderboard v3, vLLM 0.11.1, 1x H100, "
            "Llama-3.1-8B bf16, max_num_seqs 64): 'reduces energy per token by 41% (0.20 J to 0.12 J)'",
            "https://ml.energy/blog/ (docs/posts/llm-energy-over-time.md of github.com/ml-energy/blog)",
            "2025-12 (read 2026-12-01)")

MLENERGY_B16 = ("ML.ENERGY leaderboard v3 (vLLM 0.11.1, 1x H100, Llama-3.1-8B bf16, max_num_seqs 16): 0.263 J per "
                "output token, 1954 tok/s, 513 W, digitised from the post's plots (measured_parameters.md B1)",
                MLENERGY[1], MLENERGY[2])

GPTFAST_TP = ("pytorch-labs/gpt-fast README.md, 'Tensor Parallelism' table (8xA100-80GB power-limited to 330 W, "
              "hybrid cube mesh, batch 1, 5-token prompt, torch.compile, ENABLE_INTRA_NODE_COMM=1 torchrun)",
              "https://github.com/pytorch-labs/gpt-fast", "2023-11 (read 2026-12-01)")
GPTFAST_Q = ("pytorch-labs/gpt-fast README.md, 'Benchmarks' and 'Tensor Parallelism + Quantization' tables "
             "(8xA100-80GB at 330 W, batch 1, int8 weight-only; int4 weight-only group size 32)",
             "https://github.com/pytorch-labs/gpt-fast", "2023-11 (read 2026-12-01)")
NIM = ("NVIDIA NIM LLM benchmarking guide 1.0.0, 'Performance': Llama-3.3-70b-Instruct NIM 1.8.0 on 2 x H100 80G, "
       "fp8, TP2, AIPerf at concurrency 1 (TTFT and ITL)",
       "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md", "2025 (read 2026-12-01)")
TRTLLM_V05 = ("NVIDIA TensorRT-LLM, docs/source/performance.md, 'Low Latency' (data from TensorRT-LLM v0.5): first "
              "token latency at batch 1, gptSessionBenchmark with one output token (engine only: no server, tokenizer "
              "or scheduler); Llama2-7b/-70b engines built with --remove_input_padding --enable_context_fmha "
              "--use_gpt_attention_plugin float16, on H100 --enable_fp8 --fp8_kv_cache --strongly_typed (FP8 GEMMs and "
              "KV), on A100 without them (FP16); the doc's command lines loop batch 64, its table says batch 1",
              "https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d45f90b9667426f7c47297d8c06bafac73/docs/source/"
              "performance.md", "2023-11 (read 2026-12-07)")
AZURE_H200 = ("Azure AI-benchmarking-guide, Azure_Results/ND_H200_v5_results.md: 8 x H200, NCCL 2.20.5, NVLS, "
              "all_reduce_perf in place (bus bandwidth; chips-2026.md 2c [S33a])",
              "https://github.com/Azure/AI-benchmarking-guide", "2025 (read 2026-12-01)")
AZURE_GB200 = ("Azure AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md: 4 x GB200 (one host of an NVL72 "
               "rack), NCCL 2.25.1, Ring, all_reduce_perf in place (bus bandwidth; chips-2026.md 2c [S33])",
               "https://github.com/Azure/AI-benchmarking-guide", "2025 (read 2026-12-01)")
TRITON_DIST = ("ByteDance-Seed/Triton-distributed issue #57: NCCL all-reduce through torch.distributed, 8 x H100 in one "
               "node (measured_parameters.md C1)", "https://github.com/ByteDance-Seed/Triton-distributed/issues/57",
               "2025 (read 2026-12-01)")
NCCL_TESTS_123 = ("NVIDIA/nccl-tests issue #123: DGX-A100, nccl-tests all_reduce_perf, Ring, NCCL_MAX_NCHANNELS=1, "
                  "8-128 B (measured_parameters.md C6)", "https://github.com/NVIDIA/nccl-tests/issues/123",
                  "2022 (read 2026-12-01)")
NCCL_1259 = ("NVIDIA/nccl issue #1259: HGX 8 x H100, NCCL 2.20.5, nccl-tests with CUDA graphs (-G 10), 128 B-64 KB "
             "on 2 GPUs (measured_parameters.md C4)", "https://github.com/NVIDIA/nccl/issues/1259", "2024 (read 2026-12-01)")
def _mlenergy_at(what: str, ref: str):
    """An ML.ENERGY v3 point (the longitudinal post's plots, digitised: measured_parameters.md ``ref``)."""
    return (f"ML.ENERGY leaderboard v3 (vLLM 0.11.1, {what}), digitised from the post's plots "
            f"(measured_parameters.md {ref})", MLENERGY[1], MLENERGY[2])


ALICE_ENERGY = ("Serial Alice 'Alice Benchmark' (vLLM AsyncLLMEngine, BF16, H100 SXM 80GB on RunPod, nvidia-smi "
                "board energy): Mistral 7B at batch 128 13.8 uWh per token (batch 1: 732 uWh)",
                "https://reddit.fufik.eu/r/FunMachineLearning/comments/1ttmzvp/project_alice_benchmark_first_cryptographically/",
                "2026-11 (read 2026-12-07)")

MLENERGY_70B = ("ML.ENERGY leaderboard v3 (vLLM 0.11.1, 4 x H100, TP4, Llama-3.1-70B bf16, max_num_seqs 16): 2.09 J per "
                "output token, digitised from the post's plots (measured_parameters.md B3)", MLENERGY[1], MLENERGY[2])


# nccl-tests and torch.distributed without CUDA graphs launch each collective through the host API:
# cudaLaunchKernel 3.42 us on average on A100 (measured_parameters.md D8, ALCF Polaris nsys; taken for
# Hopper too: estimate), raw cuLaunchKernel 3.0 us on GB200 (D9, meta-pytorch/tritonbench PR #1017).
HOST_LAUNCH_S = 3.42e-6
HOST_LAUNCH_GB200_S = 3.0e-6


def _curve_rows(prefix, system, ranks, algorithm, sizes, busbw, source, note, launch_s):
    names = {1 << 10: "1k", 1 << 20: "1m", 16 << 20: "16m", 64 << 20: "64m", 256 << 20: "256m", 1 << 30: "1g",
             8 << 30: "8g"}
    return [dict(id=f"{prefix}-{names[sz]}", kind="busbw", system=system, ranks=ranks, algorithm=algorithm, size=sz,
                 launch_s=launch_s, measured=bw, unit="GB/s", source=source, note=note)
            for sz, bw in zip(sizes, busbw)]


# ChatGLM2-6B is ChatGLM3-6B's architecture (same config.json fields) with seq_length 32768
# (huggingface.co/THUDM/chatglm2-6b config.json); ChatGLM-6B (first generation) is the preset
# configs/models/chatglm-6b.json (THUDM/chatglm-6b's config: 28 layers, hidden 4096, 32 heads with full
# multi-head KV, a GeLU FFN of 16,384, vocabulary 130,528, 2,048 positions).

# The ChatGLM memory rows: a "6 GB" card holds 6 GiB (GDDR6 devices come in binary sizes: 8 Gb = 1 GiB
# each); the runtime (Hugging Face transformers, eager, no CUDA graphs) keeps the CUDA context, taken as
# vLLM's measured non-torch memory with lazy module loading, 0.16 GiB on H100 (configs/chips/h100.toml
# [S310]; lazy loading is PyTorch's default since 1.13): an estimate for a 2023 consumer card. No CUDA
# graph pool; fragmentation not estimated (the eager peak, in the chatglm-6b row's note, is larger).
GPU_6GB = 6 * 2 ** 30
HF_RESERVE = 164 * 2 ** 20

# kind: decode (tokens/s at batch 1), energy (J per output token), context (tokens that fit),
# memory (bytes in use at a context), speed_ratio (tokens/s of one model over another)
MEASURED = [
    dict(id="h100-llama31-8b", kind="decode", aim=True, model="llama-3.1-8b", chip="h100", context=100, measured=126.90,
         unit="tok/s", source=TORCHAO,
         note="torchao's Llama-3.1-8B bf16 streams 1905 GB/s (its own column), 57% of 3.35 TB/s against the "
              "95% a reduction kernel reaches [chip file S104]: Inductor's batch-1 GEMV kernels leave "
              "H100 bandwidth unused (the same code reaches 70% on A100). tierlab models reachable "
              "bandwidth, not one code generator's, so it is high here; L2-bound because every streamed "
              "block is charged as an L2 fill plus a read at 5.5 TB/s. The README names only 'NVIDIA-H100': "
              "were it the PCIe card (2.0 TB/s HBM2e), 1905 GB/s would be 93% of its peak and the gap "
              "the card's, not the model's"),
    dict(id="a100-llama2-7b-torchao", kind="decode", aim=True, model="llama-2-7b", chip="a100", context=100,
         measured=107.38, unit="tok/s", source=TORCHAO,
         note="bandwidth-bound; the A100 L2 bandwidth (3.3 TB/s) is an estimate and binds the calibrated "
              "step (fill + read of every weight block); 32 layers x 15 ops = 483 kernels at 1.3 us"),
    dict(id="a100-llama2-7b-gptfast", kind="decode", aim=True, model="llama-2-7b", chip="a100", context=100,
         measured=104.9, unit="tok/s", source=GPTFAST,
         note="the same run as torchao's at 330 W (gpt-fast: 'peak bandwidth is about 1700 GB/s')"),
    dict(id="a100-llama3-8b", kind="decode", aim=True, model="llama-3.1-8b", chip="a100", context=100, measured=95.64,
         unit="tok/s", source=TORCHAO,
         note="measured on Llama-3-8B, whose shapes equal Llama-3.1-8B's (only RoPE scaling differs)"),
    dict(id="h100-llama2-7b", kind="decode", model="llama-2-7b", chip="h100", context=100, measured=None,
         unit="tok/s", source=("no published batch-1 bf16 decode rate of Llama-2-7B on one H100 found in "
                               "the sources searched (torchao, gpt-fast, TensorRT-LLM performance pages)", "-", "-"),
         note="prediction only"),
    dict(id="a100-chatglm2-6b-speed", kind="decode", model="chatglm2-6b", chip="a100", context=1000,
         measured=44.62, unit="tok/s", source=CHATGLM2,
         note="the official Hugging Face implementation in eager PyTorch, no CUDA graphs: each op pays "
              "host dispatch, so the step is host-bound; implied overhead per kernel in the notes column "
              "'implied'. Not a bandwidth measurement: outside the aim"),
    dict(id="a100-chatglm2-vs-chatglm-speed", kind="speed_ratio", model="chatglm2-6b", other="chatglm-6b",
         chip="a100", context=1000, measured=44.62 / 31.49, unit="x", source=CHATGLM2,
         note="ChatGLM2-6B / ChatGLM-6B tokens/s (44.62 / 31.49, the README's '42% faster'); tierlab's "
              "ratio of calibrated rates (bytes per token: MQA KV and a 65k vocabulary against full MHA "
              "and 130k). Both measured rates are host-bound (see a100-chatglm2-6b-speed), so their ratio "
              "reflects the two eager implementations (ChatGLM-6B's 2-D RoPE and naive attention cost "
              "more ops and Python per token), which a count of bytes cannot see"),
    dict(id="h100-llama31-8b-vllm-b16", kind="decode", model="llama-3.1-8b", chip="h100", context=1024, batch=16,
         measured=1954, unit="tok/s", source=MLENERGY_B16,
         note="output tokens/s of a vLLM server holding up to 16 sequences (continuous batching: the "
              "measured rate also pays the prompts' prefill and scheduling); digitised from the post's "
              "plot by the reference table's author (medium confidence); context 1024 is an estimate"),
    dict(id="h100-llama31-8b-energy-b16", kind="energy", model="llama-3.1-8b", chip="h100", context=1024,
         batch=16, measured=0.263, unit="J/token", source=MLENERGY_B16,
         note="513 W average board power / 1954 tok/s; as the batch-64 row, board energy against tierlab's "
              "dynamic data-movement and arithmetic energy"),
    dict(id="h100-llama31-8b-energy-b64", kind="energy", model="llama-3.1-8b", chip="h100", context=1024,
         batch=64, measured=0.12, unit="J/token", source=MLENERGY,
         note="measured = whole-GPU board energy (static and idle power, clocks, the whole serving run "
              "with prefill) / output tokens; tierlab counts only data movement and arithmetic energy, "
              "so it is a lower bound; context 1024 is an estimate of the chat workload"),
    dict(id="chatglm2-6b-int4-6gb-context", kind="context", model="chatglm2-6b", memory=GPU_6GB,
         weights="int4-g128", reserve=HF_RESERVE, measured=8192, unit="tokens", source=CHATGLM2,
         note="the README's claim is a tested lower bound ('can generate at least 8192 tokens' in 6 GB at "
              "INT4, the length of its dialogue training), not a maximum: tierlab's longest context whose "
              "weights + KV + workspace + the runtime's reserve fit must be >= it, and it is (ratio > 1 is "
              "consistent; outside the band by construction). 6 GB is a 6 GiB card (GDDR6 devices are "
              "binary-sized); int4-g128 keeps the embedding and LM head in fp16 as the official INT4 does; "
              "reserve: the CUDA context (HF_RESERVE)"),
    dict(id="chatglm-6b-int4-6gb-context", kind="context", model="chatglm-6b", memory=GPU_6GB, weights="int4-g128",
         reserve=HF_RESERVE, measured=1119, unit="tokens", source=CHATGLM2,
         note="'ChatGLM-6B can only generate a maximum of 1119 tokens before running out of memory' (6 GB, "
              "INT4): a measured maximum. tierlab (6 GiB, embedding and LM head fp16, the CUDA context with "
              "lazy loading 0.16 GiB) says 2615. The gap, counted from the first generation's eager "
              "implementation (THUDM/chatglm-6b modeling_chatglm.py): each round re-feeds the whole "
              "history as a prompt, whose forward applies the LM head to every position and copies it "
              "(permute().contiguous(): 2 x P x 130,528 x 2 B = 0.52 MB a token) and materialises the "
              "attention scores in fp16, fp32 and the fp32 softmax (32 heads x P^2 x 10 B, one layer at a "
              "time, smaller at P ~ 1100); with that peak beside the KV (0.46 MB a token) the longest P is "
              "1.20 GB / 0.98 MB = 1223 tokens, 1.09x the measured. tierlab's workspace is a flash-attention "
              "step with one logits row a sequence, so this runtime's peak is not in it. Without lazy "
              "module loading the context is ~0.7 GiB (PyTorch forum, 2020) and tierlab says 1337"),
    dict(id="chatglm2-6b-int4-mem-8k", kind="memory", model="chatglm2-6b", weights="int4-g128", context=8192,
         reserve=HF_RESERVE, measured=5.1e9, unit="B", source=CHATGLM2,
         note="README table, INT4, decoding 8192 tokens: 5.1 GB. tierlab counts weights (INT4 blocks with the "
              "embedding and output layer in fp16, as the official INT4 keeps them; per-128 scales and zeros "
              "where the official has one scale a row, +0.1 GB) + KV + a decode step's activations + the CUDA "
              "context (HF_RESERVE); the eager implementation's prefill peak (all-position logits) and the "
              "allocator's cache hold the rest"),
    dict(id="chatglm2-6b-fp16-mem-8k", kind="memory", model="chatglm2-6b", weights="bf16", context=8192,
         reserve=HF_RESERVE, measured=12.8e9, unit="B", source=CHATGLM2,
         note="README table, FP16/BF16, decoding 8192 tokens: 12.8 GB (with the CUDA context, HF_RESERVE)"),
    # ---- many chips: batch-1 decode with tensor parallelism (issue 22) --------------------------------
    *[dict(id=f"a100x{tp}-llama2-{m}-tp{tp}", kind="decode", aim=True, model=f"llama-2-{m}", system="dgx-a100-x16",
           tp=tp, context=100, measured=v, unit="tok/s", source=GPTFAST_TP,
           note=("gpt-fast's box is a hybrid cube mesh with PyTorch's intra-node all-reduce; the preset is an "
                 "NVSwitch DGX with NCCL's algorithms. The measured steps imply ~3.3 us per kernel and ~6-7 us "
                 "per all-reduce; tierlab's 1.3 us kernels and NCCL's ~15 us ring LL all-reduce make a similar "
                 "total with a different split (docs/validation.md)"))
      for m, tp, v in (("7b", 2, 168.84), ("7b", 4, 254.02), ("7b", 8, 328.43),
                       ("70b", 2, 21.32), ("70b", 4, 38.01), ("70b", 8, 62.50))],
    dict(id="a100x8-llama2-70b-tp8-int8", kind="decode", aim=False, model="llama-2-70b", system="dgx-a100-x16", tp=8,
         context=100, weights="int8", measured=80.44, unit="tok/s", source=GPTFAST_Q,
         note="int8 weight-only: half the weight bytes, charged at a100's gemv int8 0.71 of HBM peak, an "
              "estimate (at most the cuBLAS fp16 GEMV's measured 0.71; no A100 weight-only int8 GEMV "
              "microbenchmark found). gpt-fast's own columns (1069 GB/s int8, 863 GB/s int4, 1397 GB/s bf16 on "
              "one GPU) judge these rows and are not used; outside the aim"),
    dict(id="a100x8-llama2-70b-tp8-int4", kind="decode", aim=False, model="llama-2-70b", system="dgx-a100-x16", tp=8,
         context=100, weights="int4", quant_group=32, measured=90.77, unit="tok/s", source=GPTFAST_Q,
         note="int4 weight-only, groups of 32 (scales counted), charged at a100's gemv int4 0.68 (TensorRT-LLM's "
              "int4 GEMV on A100; Marlin reaches 0.75 at groups of 128). gpt-fast's kernel is tinygemm at groups "
              "of 32, of which no A100 microbenchmark was found: it streams slower than these (863 GB/s on one "
              "GPU, its own column, not used); outside the aim"),
    dict(id="a100-llama2-7b-int8", kind="decode", aim=False, model="llama-2-7b", chip="a100", context=100,
         weights="int8", measured=155.58, unit="tok/s", source=GPTFAST_Q,
         note="one GPU, int8 weight-only: a100's gemv int8 0.71, an estimate (at most the fp16 GEMV's measured "
              "fraction; no A100 weight-only int8 GEMV microbenchmark found); outside the aim"),
    dict(id="a100-llama2-7b-int4", kind="decode", aim=False, model="llama-2-7b", chip="a100", context=100,
         weights="int4", quant_group=32, measured=196.80, unit="tok/s", source=GPTFAST_Q,
         note="one GPU, int4 weight-only, groups of 32: a100's gemv int4 0.68 (TensorRT-LLM's kernel); "
              "gpt-fast's tinygemm g32 kernel has no A100 microbenchmark found and streams slower; outside the aim"),
    dict(id="tp-scaling-llama2-7b", kind="tp_scaling", model="llama-2-7b", system="dgx-a100-x16", tp=8, tp_low=2,
         context=100, measured=328.43 / 168.84, unit="x", source=GPTFAST_TP,
         note="TP8 over TP2 speed-up (328.43 / 168.84): the shape of the scaling, the issue's ±20% target"),
    dict(id="tp-scaling-llama2-70b", kind="tp_scaling", model="llama-2-70b", system="dgx-a100-x16", tp=8, tp_low=2,
         context=100, measured=62.50 / 21.32, unit="x", source=GPTFAST_TP,
         note="TP8 over TP2 speed-up (62.50 / 21.32)"),
    dict(id="h100x2-llama33-70b-fp8-itl-5000", kind="decode", aim=True, model="llama-3.1-70b", system="dgx-h100", tp=2,
         context=5250, weights="fp8", kv="fp8", activations="fp8", measured=1000 / 18.58, unit="tok/s", source=NIM,
         note="1 / ITL (18.58 ms) at concurrency 1, 5000 input / 500 output tokens (context ~5250 on average); "
              "Llama-3.3-70B has Llama-3.1-70B's shapes; NIM's fp8 profile is TensorRT-LLM's FP8 recipe, weights "
              "and activations in FP8 (FP8 GEMMs), FP8 KV assumed"),
    dict(id="h100x2-llama33-70b-fp8-itl-500", kind="decode", aim=True, model="llama-3.1-70b", system="dgx-h100", tp=2,
         context=1500, weights="fp8", kv="fp8", activations="fp8", measured=1000 / 18.91, unit="tok/s", source=NIM,
         note="1 / ITL (18.91 ms) at concurrency 1, 500 input / 2000 output tokens (context ~1500 on average)"),
    # ---- time to first token (the prefill of the prompt) --------------------------------------------
    dict(id="h100x2-llama33-70b-fp8-ttft-5000", kind="ttft", model="llama-3.1-70b", system="dgx-h100", tp=2,
         prompt=5000, weights="fp8", kv="fp8", activations="fp8", measured=406.77, unit="ms", source=NIM,
         note="TTFT at concurrency 1, 5000 input tokens: the prefill plus the client's and server's request "
              "handling (a few ms, not modelled)"),
    dict(id="h100x2-llama33-70b-fp8-ttft-500", kind="ttft", model="llama-3.1-70b", system="dgx-h100", tp=2,
         prompt=500, weights="fp8", kv="fp8", activations="fp8", measured=47.77, unit="ms", source=NIM,
         note="TTFT at concurrency 1, 500 input tokens: at this size the request handling and the first "
              "decode step are a larger share"),
    # TensorRT-LLM v0.5's first-token latency (issue 39's short prefill): gptSession launches each kernel through
    # the host API (CUDA graphs, where v0.5 had them, served generation steps, not the context phase), so the rows
    # take HOST_LAUNCH_S per kernel in place of the chip file's CUDA-graph 1.3 us (a sourced cost, not fitted here)
    *(dict(id=f"{gpu}-llama2-{size}-{wt}-ttft-{n}", kind="ttft", model=f"llama-2-{size}",
           **({"chip": gpu} if tp == 1 else {"system": system, "tp": tp}), prompt=n, weights=wt, kv=wt,
           activations=wt, kernel_overhead=f"{HOST_LAUNCH_S * 1e6} us", measured=ms, unit="ms", source=TRTLLM_V05,
           note=f"batch 1, {n}-token prompt, TP{tp}, {wt.upper()} GEMMs and KV; each kernel launched through the "
                f"host API ({HOST_LAUNCH_S * 1e6} us, D8) instead of a CUDA graph"
                + ("; out at 128 tokens on H100 (0.62): 26 ms against 5.2 ms to stream the FP8 weights once per GPU; "
                   "what the rest is (v0.5's FP8 GEMMs at M = 128, 160 NCCL all-reduces of 2 MB) the source does not "
                   "break down" if (gpu, n) == ("h100x4", 128) else ""))
      for gpu, system, size, tp, wt, n, ms in (
          ("h100", "dgx-h100", "7b", 1, "fp8", 128, 7), ("h100", "dgx-h100", "7b", 1, "fp8", 2048, 36),
          ("a100", "dgx-a100-x16", "7b", 1, "fp16", 128, 16), ("a100", "dgx-a100-x16", "7b", 1, "fp16", 2048, 133),
          ("h100x4", "dgx-h100", "70b", 4, "fp8", 128, 26), ("h100x4", "dgx-h100", "70b", 4, "fp8", 2048, 109),
          ("a100x4", "dgx-a100-x16", "70b", 4, "fp16", 128, 47),
          ("a100x4", "dgx-a100-x16", "70b", 4, "fp16", 2048, 377))),
    # ---- collectives: nccl-tests all-reduce bus bandwidth and small-message times --------------------
    *_curve_rows("nccl-h200x8-nvls", "hgx-h200", 8, "in_network",
                 (1 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 8 << 30),
                 (0.06, 52.96, 240.41, 368.11, 432.24, 467.58, 479.98), AZURE_H200,
                 "NVLS forced (NCCL_ALGO=NVLS): tierlab's in_network algorithm with NCCL's NVLS latency (25 us) "
                 "and efficiency (0.85); mid sizes ramp slower in NCCL (fewer channels, chunk pipelining), "
                 "which the model does not see; launched through the host API (no CUDA graphs)", HOST_LAUNCH_S),
    *_curve_rows("nccl-gb200x4-ring", "gb200-nvl72", 4, "ring",
                 (1 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 8 << 30),
                 (0.10, 80.48, 331.09, 550.73, 593.53, 646.87, 679.61), AZURE_GB200,
                 "Ring forced; NVLink 5 at 900 GB/s per direction and H100's 0.82 achievable fraction; host-API "
                 "launch (no CUDA graphs)", HOST_LAUNCH_GB200_S),
    *[dict(id=f"nccl-h100x8-{k}", kind="collective", system="dgx-h100", ranks=8, algorithm="auto", size=sz,
           launch_s=HOST_LAUNCH_S, measured=us, unit="us", source=TRITON_DIST,
           note="NCCL through torch.distributed without CUDA graphs: the host API's launch (D8) in place of "
                "the chip's 1.3 us graph-launched kernel")
      for k, sz, us in (("16k", 16 << 10, 20.71), ("64k", 64 << 10, 23.05), ("256k", 256 << 10, 24.76),
                        ("512k", 512 << 10, 25.24), ("1m", 1 << 20, 32.42))],
    dict(id="nccl-a100x8-small", kind="collective", system="dgx-a100-x16", ranks=8, algorithm="ring", size=128,
         launch_s=HOST_LAUNCH_S, measured=33.7, unit="us", source=NCCL_TESTS_123,
         note="one channel (NCCL_MAX_NCHANNELS=1) and an older NCCL: its per-step latency on A100 is ~3x the "
              "0.6 us NCCL's tuning model carries for LL on NVLink today"),
    dict(id="nccl-a100x2-small", kind="collective", system="dgx-a100-x16", ranks=2, algorithm="ring", size=128,
         launch_s=HOST_LAUNCH_S, measured=10.0, unit="us", source=NCCL_TESTS_123, note="the same test on 2 GPUs"),
    dict(id="nccl-h100x2-graphs", kind="collective", system="dgx-h100", ranks=2, algorithm="auto", size=64 << 10,
         measured=6.0, unit="us", source=NCCL_1259,
         note="CUDA graphs hide the launch, and NCCL 2.20 on 2 GPUs beats its own tuning model's 6.6 us base "
              "latency: outside the band, kept"),
    # ---- energy on many chips ----------------------------------------------------------------------
    # ---- more board-energy rows (issue 39): other batches, another model, another benchmark ----------
    dict(id="h100-llama31-8b-energy-b128", kind="energy", model="llama-3.1-8b", chip="h100", context=1024,
         batch=128, measured=0.095, unit="J/token", source=_mlenergy_at("1x H100, Llama-3.1-8B bf16, max_num_seqs "
                                                                          "128: 0.095 J per output token", "B1"),
         note="the batch-16/64 rows' run at max_num_seqs 128 (digitised, medium confidence); context 1024 an "
              "estimate of the chat workload"),
    dict(id="h100x4-llama31-70b-energy-b64", kind="energy", model="llama-3.1-70b", system="dgx-h100", tp=4,
         context=1024, batch=64, measured=0.80, unit="J/token",
         source=_mlenergy_at("4 x H100, TP4, Llama-3.1-70B bf16, max_num_seqs 64: 0.80 J per output token", "B3"),
         note="the 70B batch-16 row's run at 64 sequences (digitised, medium confidence)"),
    dict(id="h100x4-llama31-70b-energy-b256", kind="energy", model="llama-3.1-70b", system="dgx-h100", tp=4,
         context=1024, batch=256, measured=0.48, unit="J/token",
         source=_mlenergy_at("4 x H100, TP4, Llama-3.1-70B bf16, max_num_seqs 256: 0.48 J per output token", "B3"),
         note="the 70B batch-16 row's run at 256 sequences (digitised, medium confidence)"),
    dict(id="h100-mistral-7b-energy-b128", kind="energy", model="mistral-7b", chip="h100", context=1024,
         batch=128, measured=13.8e-6 * 3600, unit="J/token", source=ALICE_ENERGY,
         note="Mistral-7B bf16 on one H100 SXM under vLLM's AsyncLLMEngine at batch 128: 13.8 uWh = 0.0497 J "
              "per token, nvidia-smi board power. Another model and another benchmark than ML.ENERGY's. Not "
              "independent of the chip file in full: h100's [power] static (267 W) is the same benchmark's "
              "batch-1 board power; this row is its batch-128 measurement. Context 1024 is an estimate (the "
              "post gives no lengths)"),
    dict(id="h100x4-llama31-70b-energy-b16", kind="energy", model="llama-3.1-70b", system="dgx-h100", tp=4,
         context=1024, batch=16, measured=2.09, unit="J/token", source=MLENERGY_70B,
         note="whole-board energy of 4 GPUs over a serving run against tierlab's dynamic data-movement, "
              "arithmetic and network energy: a lower bound, outside the band by construction (as the one-GPU "
              "energy rows)"),
]

# ---- SERVING_ROWS (issue 23; kept by the serving work, one block): max-load throughput of ----------
# continuous batching, `tierlab throughput`'s max_output_tokens_per_s (the best point of the curve up to
# the KV limit) against published offline maximum-load runs. Band +-30%. The chips' calibration is not
# fitted to these rows.
TRTLLM_PERF = ("TensorRT-LLM docs, performance/perf-overview.md (v1.0), 'Throughput Measurements': trtllm-bench "
               "throughput, PyTorch backend, offline maximum load (every request queued at once, synthetic "
               "requests of fixed ISL/OSL, stdev 0; 3000 requests at 1000/1000 and 500/2000 and 2048/128, 3000 at "
               "128/2048), nvidia/*-FP8 ModelOpt checkpoints (FP8 weights, activations and KV), CUDA graphs up to "
               "batch 8192, kv_cache_free_gpu_mem_fraction 0.90-0.95; 'Total Output Throughput (tokens/sec)' of "
               "the whole system (chips-2026.md cites a mirror as S56)",
               "https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md",
               "2025 (read 2026-12-02)")


def _serving(rid, model, where, tp, isl, osl, measured, note, weights="fp8", activations="fp8"):
    place = {"system": where, "tp": tp} if tp > 1 else {"chip": where}
    return dict(id=rid, kind="throughput", model=model, **place, isl=isl, osl=osl, weights=weights, kv="fp8",
                activations=activations, measured=measured, unit="tok/s", source=TRTLLM_PERF, note=note,
                predictor="serving")


_SERVED: dict[tuple, dict] = {}


def _served(row: dict, pred) -> dict:
    """:func:`serving_prediction` once per setup (the chip-ratio rows reuse the serving rows' curves)."""
    key = tuple((k, row.get(k)) for k in ("model", "chip", "system", "tp", "isl", "osl", "weights", "kv",
                                           "activations"))
    if key not in _SERVED:
        _SERVED[key] = serving_prediction(row, pred)
    return _SERVED[key]


def serving_prediction(row: dict, pred) -> dict:
    """``tierlab throughput``'s best point for the row's setup (concurrency auto, up to the KV limit)."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.serving.throughput import throughput
    from tierlab.system.systemfile import load_system

    where = {"system": load_system(row["system"])} if "system" in row else {"chip": load_chip(row["chip"])}
    d = throughput(model_spec(row["model"]), **where, isl=row["isl"], osl=row["osl"], weights=row["weights"],
                   kv=row["kv"], activations=row["activations"], tp=row.get("tp", 1))
    best = next(p for p in d["curve"] if p["concurrency"] == d["best_concurrency"])
    return {"roofline": None, "calibrated": d["max_output_tokens_per_s"], "best_concurrency": d["best_concurrency"],
            "max_concurrency": d["max_concurrency"], "tpot_s": best["tpot_s"], "ttft_s": best["ttft_s"],
            "replays": d["provenance"]["representative_steps"]["replays"]}


SERVING_ROWS = [
    _serving("h100-llama31-8b-fp8-serve-1000-1000", "llama-3.1-8b", "h100", 1, 1000, 1000, 15220,
             "one H100, TP1, ISL/OSL 1000/1000 (the issue's example row)"),
    _serving("h100-llama31-8b-fp8-serve-500-2000", "llama-3.1-8b", "h100", 1, 500, 2000, 17660,
             "one H100, TP1, ISL/OSL 500/2000"),
    _serving("h100-llama31-8b-fp8-serve-128-2048", "llama-3.1-8b", "h100", 1, 128, 2048, 22714,
             "one H100, TP1, ISL/OSL 128/2048: decode-heavy"),
    _serving("h100-llama31-8b-fp8-serve-2048-128", "llama-3.1-8b", "h100", 1, 2048, 128, 3450,
             "one H100, TP1, ISL/OSL 2048/128: prefill-heavy"),
    _serving("h200-llama31-8b-fp8-serve-1000-1000", "llama-3.1-8b", "h200", 1, 1000, 1000, 17744,
             "one H200, TP1, ISL/OSL 1000/1000"),
    _serving("h100x2-llama33-70b-fp8-serve-1000-1000", "llama-3.1-70b", "dgx-h100", 2, 1000, 1000, 4205,
             "2 x H100 (DGX H100), TP2, ISL/OSL 1000/1000; Llama-3.3-70B has Llama-3.1-70B's shapes"),
    _serving("h100x2-llama33-70b-fp8-serve-2048-128", "llama-3.1-70b", "dgx-h100", 2, 2048, 128, 762,
             "2 x H100 (DGX H100), TP2, ISL/OSL 2048/128"),
]

# ---- CHIP_RATIO_ROWS (issue 39): one chip's max-load throughput over another's, the same source, software
# and setup, so that what differs is the chip. Band +-8 % where the chips differ by more than 10 %, +-10 %
# otherwise. Each side is the serving row of the same id above (per GPU where the TP differs).
SERVING_ROWS += [
    _serving("h200-llama33-70b-fp8-serve-1000-1000", "llama-3.1-70b", "h200", 1, 1000, 1000, 2909,
             "one H200 (141 GB), TP1, ISL/OSL 1000/1000: the 70B fp8 weights fit one chip"),
    _serving("b200-llama33-70b-fp4-serve-1000-1000", "llama-3.1-70b", "b200", 1, 1000, 1000, 7007,
             "one B200 (DGX B200, 180 GB), TP1, ISL/OSL 1000/1000, nvidia/Llama-3.3-70B-Instruct-FP4 (NVFP4 weights "
             "and activations, FP8 KV)", weights="nvfp4", activations="nvfp4"),
    _serving("gb200-llama33-70b-fp4-serve-1000-1000", "llama-3.1-70b", "gb200", 1, 1000, 1000, 7326,
             "one GB200 GPU (GB200 NVL72, 192 GB), TP1, ISL/OSL 1000/1000, NVFP4 as the B200 row",
             weights="nvfp4", activations="nvfp4"),
]


def _ratio(rid, num, den, measured, note, num_gpus=1, den_gpus=1):
    return dict(id=rid, kind="chip_ratio", model=None, num=num, den=den, num_gpus=num_gpus, den_gpus=den_gpus,
                measured=measured, unit="x", source=TRTLLM_PERF, note=note, predictor="chip_ratio")


CHIP_RATIO_ROWS = [
    _ratio("ratio-h200-h100-llama31-8b-fp8", "h200-llama31-8b-fp8-serve-1000-1000",
           "h100-llama31-8b-fp8-serve-1000-1000", 17744 / 15220,
           "H200 over H100, one chip each, Llama-3.1-8B fp8 1000/1000: 4.8 against 3.35 TB/s of HBM, 141 against "
           "80 GB"),
    _ratio("ratio-h200tp1-h100tp2-llama33-70b-fp8", "h200-llama33-70b-fp8-serve-1000-1000",
           "h100x2-llama33-70b-fp8-serve-1000-1000", 2909 / (4205 / 2),
           "per GPU: one H200 at TP1 over two H100s at TP2, Llama-3.3-70B fp8 1000/1000", den_gpus=2),
    _ratio("ratio-gb200-b200-llama33-70b-fp4", "gb200-llama33-70b-fp4-serve-1000-1000",
           "b200-llama33-70b-fp4-serve-1000-1000", 7326 / 7007,
           "GB200 over B200, one GPU each, Llama-3.3-70B NVFP4 1000/1000: the same HBM bandwidth (8 TB/s), 192 "
           "against 180 GB, GB200's higher power limit"),
]


def chip_ratio_prediction(row: dict, pred) -> dict:
    """The ratio of two serving rows' predictions, per GPU."""
    by_id = {r["id"]: r for r in SERVING_ROWS}
    a, b = _served(by_id[row["num"]], pred), _served(by_id[row["den"]], pred)
    ratio = (a["calibrated"] / row["num_gpus"]) / (b["calibrated"] / row["den_gpus"])
    return {"roofline": None, "calibrated": ratio}


def chip_ratio_band(measured: float) -> float:
    """+-8 % where the chips differ by more than 10 %, +-10 % otherwise (issue 39)."""
    return 0.08 if abs(measured - 1) > 0.10 else 0.10


MEASURED += SERVING_ROWS + CHIP_RATIO_ROWS

# ---- REQUEST_ROWS (issue 41): the request stream's prefix cache against Mooncake's FAST'25 paper. ---------------
MOONCAKE = ("Qin et al., 'Mooncake: Trading More Storage for Less Computation -- A KVCache-centric Architecture for "
            "Serving LLM Chatbot', USENIX FAST 2025, Table 2 ('Cache Ratio' of the released traces: Conversation "
            "40 %, Tool&Agent 59 %, Synthetic 66 %); the traces themselves: kvcache-ai/Mooncake "
            "FAST25-release/traces (benchmarks/data/mooncake/, Apache-2.0)",
            "https://www.usenix.org/conference/fast25/presentation/qin", "2025-02 (read 2026-12-07)")
DATA = ROOT / "benchmarks" / "data" / "mooncake"
REQUEST_ROWS = [
    dict(id="mooncake-conversation-cache-ratio", kind="cache_ratio", trace=str(DATA / "conversation_trace.jsonl.xz"),
         measured=0.40, unit="ratio", source=MOONCAKE, predictor="cache_ratio",
         note="the token hit ratio of an infinite prefix cache (tierlab mrc: the longest run of a request's leading "
              "512-token blocks seen before; hit tokens min(k x 512, input)). The paper does not define its ratio "
              "exactly; counted by blocks tierlab gives 0.366, by tokens 0.374"),
    dict(id="mooncake-synthetic-cache-ratio", kind="cache_ratio", trace=str(DATA / "synthetic_trace.jsonl.xz"),
         measured=0.66, unit="ratio", source=MOONCAKE, predictor="cache_ratio",
         note="as the conversation row, on the synthetic trace (by blocks 0.640, by tokens 0.651)"),
]


def cache_ratio_prediction(row: dict, pred) -> dict:
    """``tierlab mrc``'s hit ratio at infinite capacity for the row's trace."""
    from tierlab.kvstream.hitcurve import hit_curve
    from tierlab.kvstream.reader import read_requests

    d = hit_curve(read_requests(row["trace"])).to_dict()
    return {"roofline": None, "calibrated": d["max_hit_ratio_tokens"], "requests": d["requests"],
            "unique_blocks": d["unique_blocks"]}


MOONCAKE_EQ2 = ("Qin et al., Mooncake (USENIX FAST 2025), Section 4 (Eq. 2): reusing a cached prefix beats "
                "recomputing it when B/G > 2ds / (gqa (apd + bd^2)); for LLaMA3-70B and an 8,192-token prefix 'the "
                "bandwidth B must exceed 6 GB/s' on 8 x A800 and 19 GB/s on 8 x H800 (G the GPUs' peak FLOP/s)",
                MOONCAKE[1], MOONCAKE[2])
REQUEST_ROWS += [
    dict(id="mooncake-eq2-break-even-a100x8", kind="break_even", model="llama-3.1-70b", system="dgx-a100-x16", tp=8,
         prefix_tokens=8192, measured=6e9, unit="B/s", source=MOONCAKE_EQ2, predictor="break_even",
         note="tierlab's own break-even: the prefix's KV bytes over the calibrated prefill time of the 8,192 tokens "
              "on 8 x A100 at TP8 (an A800 is an A100 with 400 GB/s NVLink). Mooncake divides by the GPUs' peak "
              "FLOP/s; a replayed prefill reaches less (GEMMs at the chip's achievable fraction, attention, the TP "
              "all-reduces), so the bandwidth that beats it is lower. Band x2"),
    dict(id="mooncake-eq2-break-even-h100x8", kind="break_even", model="llama-3.1-70b", system="dgx-h100", tp=8,
         prefix_tokens=8192, measured=19e9, unit="B/s", source=MOONCAKE_EQ2, predictor="break_even",
         note="as the A100 row on 8 x H100 (an H800 is an H100 with 400 GB/s NVLink): the replayed prefill reaches "
              "about a third of bf16 peak (0.47 s against 0.15 s at peak), hence a break-even about 3x below the "
              "paper's"),
]


VLLM_OFFLOAD = ("vLLM blog, O. Ozeri and D. Harnik (IBM Research), 'Inside vLLM's New Offloading Connector: Smarter "
                "Memory Transfer for Maximizing Inference Throughput' (vllm-project/vllm-project.github.io "
                "_posts/2025-12-29-offloading-connector.md): 'loading KV values from the CPU reduces TTFT by X2-X22, "
                "depending on the prompt size' and 'TTFT for this prompt size [512 tokens] only decreased by X2'; "
                "Llama-3.1-8B-Instruct, one H100 80GB HBM3, 500 GB DRAM, vLLM 2a1776b7, Flash Attention, GPU prefix "
                "caching disabled, 16-token GPU and CPU blocks", "https://blog.vllm.ai/", "2025-12-29 (read 2026-12-07)")
REQUEST_ROWS += [
    dict(id="vllm-cpu-offload-ttft-512", kind="speedup", model="llama-3.1-8b", chip="h100", prompt=512, block=16,
         measured=2.0, unit="x", source=VLLM_OFFLOAD, predictor="offload_ttft",
         note="the TTFT of a 512-token prompt recomputed over its TTFT when its KV loads from host DRAM (tierlab "
              "requests: the prompt, another that evicts it from an HBM holding one request's KV -- GPU prefix "
              "caching off -- then the prompt again, with and without --kv-tier dram=500GB; 31 of 32 blocks load "
              "over PCIe Gen5, the last block and the first token are computed)"),
]


def offload_ttft_prediction(row: dict, pred) -> dict:
    """TTFT recomputed / TTFT loaded from DRAM for one prompt, from :func:`tierlab.kvstream.server.serve_requests`."""
    import tempfile

    from tierlab.chip.chipfile import load_chip
    from tierlab.kvstream.reader import read_requests
    from tierlab.kvstream.server import serve_requests

    n = -(-row["prompt"] // row["block"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.csv"
        lines = ["arrival_s,input_tokens,output_tokens,hash_ids"]
        for t, first in ((0.0, 0), (10.0, 1000), (20.0, 0)):          # the prompt, one that evicts it, the prompt
            lines.append(f"{t},{row['prompt']},1,{' '.join(str(first + i) for i in range(n))}")
        path.write_text("\n".join(lines) + "\n")
        trace = read_requests(path, block_tokens=row["block"])
    spec, chip = model_spec(row["model"]), load_chip(row["chip"])
    ttft = {}
    for name, tiers in (("recompute", None), ("dram", {"dram": "500GB"})):
        r = serve_requests(trace, spec, chip=chip, kv_tiers=tiers, hbm_tokens=(n + 1) * row["block"])
        ttft[name] = r.table.column("ttft_s").to_pylist()[2]
    return {"roofline": None, "calibrated": ttft["recompute"] / ttft["dram"], "ttft_recompute_s": ttft["recompute"],
            "ttft_dram_s": ttft["dram"]}


LLMD_CPU = ("llm-d, guides/tiered-prefix-cache/cpu/README.md, Appendix 'Benchmark', table 'Memory-Bound Performance' "
            "(HBM < KVCache < HBM + CPU RAM): vLLM's native offloading connector, 'Overall Throughput (token per "
            "second)' 38534.8 without and 46662.5 with 100 GB of CPU cache (+21.1 %; mean TTFT 9.0 -> 6.7 s); "
            "Qwen/Qwen3-32B on 16 H100 80GB (4 a3-highgpu-4g of 4 GPUs), 8 engines, gpu_memory_utilization 0.65 "
            "(9271 GPU blocks an engine), num_cpu_blocks 41000, inference-perf shared_prefix: 45 groups of 10 "
            "prompts, a 30,000-token system prompt, 256-token questions, 1024 output tokens, constant concurrency "
            "45; the router's scorers: queue 2, KV-cache utilisation 2, GPU and CPU prefix 1 each "
            "(router/tiered-prefix-cache-cpu.values.yaml)",
            "https://github.com/llm-d/llm-d/blob/main/guides/tiered-prefix-cache/cpu/README.md",
            "2026 (read 2026-12-07)")
REQUEST_ROWS += [
    dict(id="llmd-cpu-offload-qwen3-32b-throughput", kind="speedup", model="qwen3-32b", system="dgx-h100-x2", tp=2,
         dp=8, groups=45, prompts_per_group=10, system_prompt=30000, question=256, output=1024, concurrency=45,
         block=16, gpu_blocks=9271, cpu_blocks=41000, router="prefix", seed=0, measured=46662.5 / 38534.8, unit="x",
         source=LLMD_CPU, predictor="offload_throughput",
         note="overall tokens/s (prompt + output) with a host-DRAM tier over without (tierlab requests, closed loop "
              "of 45 clients; 8 replicas of TP2 on dgx-h100-x2, HBM of 9271 x 16 KV tokens a replica as vLLM "
              "counted, DRAM of 41000 x 16 tokens a replica, 172 GB at Qwen3-32B's 256 KiB a token -- the guide's "
              "'~100 GB' takes 160 KB a token, Qwen3-14B's -- over PCIe Gen5; the 450 prompts once (the guide gives no "
              "request count), in a seeded shuffle as inference-perf shuffles them; router prefix, tierlab's nearest to llm-d's "
              "prefix-aware scorers). tierlab serves 34.5k and 38.7k tokens/s against the measured 38.5k and "
              "46.7k; its mean end-to-end latency falls 38.5 -> 35.0 s against 37.8 -> 31.0 s: with fewer prompts "
              "to prefill the decodes run faster in both, by less in tierlab. Not isolated; llm-d's router weighs "
              "load (queue and KV utilisation, 4) against prefix hits (2), while tierlab's prefix router already "
              "keeps 68 % of prompt tokens in HBM without the tier (with it: HBM 61 %, DRAM 25 %) -- least-loaded 11 % "
              "and gives the same ratio, 1.12. The mean TTFT is measured 9.0 -> 6.7 s, tierlab 6.8 -> 6.7 s, and "
              "its ratio moves with the shuffle (1.02 to 1.23 over three seeds, the throughput ratio 1.08 to "
              "1.12): a row of throughput, not TTFT"),
]


MOONCAKE_FIG5 = ("Qin et al., Mooncake (USENIX FAST 2025), Section 4.2, Figure 5 ('The prefill scheduling "
                 "experiment'): average TTFT 3.58 s with local cache-aware scheduling (Algorithm 1 with each instance's "
                 "own prefix: the instance of the shortest estimated queue + prefill time) against 5.27 s with "
                 "load-balancing scheduling ('the instance with the lightest load'); 16 nodes of 8 x A800, a dummy "
                 "LLaMA3-70B, the conversation trace replayed (benchmarks/data/mooncake/)", MOONCAKE[1], MOONCAKE[2])
REQUEST_ROWS += [
    dict(id="mooncake-fig5-cache-aware-vs-load-balancing-ttft", kind="speedup", model="llama-3.1-70b",
         system="dgx-a100-x16", tp=8, dp=16, trace=str(DATA / "conversation_trace.jsonl.xz"), dram="1TB",
         measured=5.27 / 3.58, unit="x", source=MOONCAKE_FIG5, predictor="router_ttft",
         note="mean TTFT with --router least-loaded over --router ttft (tierlab requests, the whole trace at its own "
              "timestamps, 16 replicas of TP8 on dgx-a100-x16 -- an A800 is an A100 with 400 GB/s NVLink -- each "
              "with its HBM and 1 TB of host DRAM, DGX A100's system memory). Mooncake's cluster is disaggregated "
              "(prefill and decode pools, their split not given) and its absolute TTFTs are higher than tierlab's "
              "colocated replicas' (tierlab 1.99 and 1.17 s): a row of the ratio. Random scheduling (19.65 s) is not "
              "a tierlab router"),
]


def router_ttft_prediction(row: dict, pred) -> dict:
    """Mean TTFT under least-loaded routing over mean TTFT under the ttft router, from serve_requests."""
    from tierlab.kvstream.reader import read_requests
    from tierlab.kvstream.server import serve_requests
    from tierlab.system.systemfile import load_system

    trace, spec, system = read_requests(row["trace"]), model_spec(row["model"]), load_system(row["system"])
    mean = {}
    for router in ("least-loaded", "ttft"):
        r = serve_requests(trace, spec, system=system, tp=row["tp"], dp=row["dp"], router=router,
                           kv_tiers={"dram": row["dram"]})
        mean[router] = r.summary["ttft_s"]["mean"]
    return {"roofline": None, "calibrated": mean["least-loaded"] / mean["ttft"],
            "ttft_least_loaded_s": mean["least-loaded"], "ttft_ttft_router_s": mean["ttft"]}


def _shared_prefix_trace(row: dict, tmp: Path):
    """inference-perf's shared_prefix workload as a request trace: ``groups`` system prompts of
    ``system_prompt`` tokens, each with ``prompts_per_group`` questions of ``question`` tokens, in a
    seeded shuffle, every request asking ``output`` tokens (a closed loop sends them)."""
    import numpy as np

    from tierlab.kvstream.reader import read_requests

    bt, g, p = row["block"], row["groups"], row["prompts_per_group"]
    sys_b, q_b = -(-row["system_prompt"] // bt), -(-row["question"] // bt)
    lines = ["arrival_s,input_tokens,output_tokens,hash_ids"]
    for k in np.random.default_rng(row["seed"]).permutation(g * p).tolist():
        group = k // p
        ids = [group * sys_b + i for i in range(sys_b)] + [g * sys_b + k * q_b + i for i in range(q_b)]
        lines.append(f"0,{row['system_prompt'] + row['question']},{row['output']},{' '.join(map(str, ids))}")
    path = tmp / "shared_prefix.csv"
    path.write_text("\n".join(lines) + "\n")
    return read_requests(path, block_tokens=bt)


def offload_throughput_prediction(row: dict, pred) -> dict:
    """Overall tokens/s (prompt + output over the run) with a host-DRAM tier of ``cpu_blocks`` blocks a
    replica over the same run without it, from :func:`tierlab.kvstream.server.serve_requests` in a
    closed loop of ``concurrency`` clients."""
    from tierlab.kvstream.server import serve_requests
    from tierlab.system.systemfile import load_system

    spec, system = model_spec(row["model"]), load_system(row["system"])
    trace = _shared_prefix_trace(row, pred.tmp)
    dram = row["cpu_blocks"] * row["block"] * spec.kv_bytes_per_token("bf16")
    out = {}
    for name, tiers in (("hbm", None), ("dram", {"dram": dram})):
        s = serve_requests(trace, spec, system=system, tp=row["tp"], dp=row["dp"], router=row["router"],
                           kv_tiers=tiers, closed_loop=row["concurrency"],
                           hbm_tokens=row["gpu_blocks"] * row["block"]).summary
        out[name] = {"tokens_per_s": (s["input_tokens"] + s["output_tokens"]) / s["duration_s"],
                     "ttft_mean_s": s["ttft_s"]["mean"], "e2e_mean_s": s["e2e_s"]["mean"],
                     "hit_ratio": s["hit_ratio"]}
    return {"roofline": None, "calibrated": out["dram"]["tokens_per_s"] / out["hbm"]["tokens_per_s"],
            "without_dram": out["hbm"], "with_dram": out["dram"], "dram_bytes_per_replica": dram}


def break_even_prediction(row: dict, pred) -> dict:
    """tierlab's load bandwidth at which a cached prefix loads as fast as it prefills
    (:func:`tierlab.kvstream.steptime.break_even_for`), for the replica (all its devices)."""
    from tierlab.kvstream.steptime import break_even_for
    from tierlab.system.systemfile import load_system

    d = break_even_for(model_spec(row["model"]), system=load_system(row["system"]), tp=row["tp"],
                       prefix_tokens=row["prefix_tokens"])
    return {"roofline": None, "calibrated": d["bandwidth_bytes_per_s"], "prefill_s": d["prefill_s"]}


ABSOLUTE_BAND = {"cache_ratio": 0.04}     # within 4 points (issue 41)
FACTOR_BAND = {"break_even": 2.0}         # within a factor of 2 either way (issue 41)
MEASURED += REQUEST_ROWS


# Rows that a change moved out of the band they were in, with why; tests/house/test_validate.py checks that they are
# still out (one coming back in must leave this table). Issue 39 stopped charging a streamed weight twice at the
# L2 (fill + read at 5.5 TB/s on H100, which the measured 95 % one-pass HBM stream rules out): H100 decode is now
# bound by its HBM at the 95 % a reduction kernel reaches, and batch-1 fp8 GEMVs reach far less (NIM's ITL implies
# 1.9 TB/s, 56 %). The fraction a decode GEMV reaches by weight format, from kernel microbenchmarks, is the next
# step of issue 39; until then these rows read 1.3x.
# The NIM fp8 ITL rows came back with h100's [execution] gemv (issue 39). KNOWN_OUT also holds a row of the
# aim's kinds that entered outside its band, with its reason (the same rule: it must be out).
KNOWN_OUT: dict[str, str] = {
    "h100x4-llama2-70b-fp8-ttft-128": "entered at 0.62 (issue 39): 26 ms measured against 5.2 ms to stream the FP8 "
                                      "weights once; TensorRT-LLM v0.5 does not break the rest down",
}
ROW_PREDICTORS = {"serving": _served, "chip_ratio": chip_ratio_prediction, "cache_ratio": cache_ratio_prediction,
                  "break_even": break_even_prediction, "offload_ttft": offload_ttft_prediction,
                  "offload_throughput": offload_throughput_prediction,
                  "router_ttft": router_ttft_prediction}   # a row's "predictor" names its own

BAND = {"decode": 0.25, "tp_scaling": 0.20, "ttft": 0.35, "busbw": 0.25, "collective": 0.25, "energy": 0.25,
        "speed_ratio": 0.25, "context": 0.25, "memory": 0.25, "throughput": 0.30, "chip_ratio": 0.08,
        "break_even": 0.50, "speedup": 0.35}


def model_spec(name: str):
    """A tierlab preset, or Qwen3-32B or ChatGLM2-6B as described beside them."""
    from tierlab.traces.model.spec import load_model, spec_from_config

    if name == "qwen3-32b":         # Qwen/Qwen3-32B's config.json: Qwen3-8B's layer at 64 layers of 5120 (64 heads)
        cfg = json.loads((ROOT / "configs" / "models" / "qwen3-8b.json").read_text())
        cfg.update(hidden_size=5120, intermediate_size=25600, num_attention_heads=64, num_hidden_layers=64,
                   max_window_layers=64)
        return spec_from_config(cfg, name="qwen3-32b")
    if name == "chatglm2-6b":
        cfg = json.loads((ROOT / "configs" / "models" / "chatglm3-6b.json").read_text())
        cfg["seq_length"] = 32768
        return spec_from_config(cfg, name="chatglm2-6b")
    return load_model(name)


class Predictor:
    """Traces each (model, run) once, in a temporary directory, and replays it on each chip."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.traces: dict[tuple, Path] = {}

    def trace(self, model: str, **run) -> Path:
        from tierlab.traces.lowering.generate import generate_trace
        from tierlab.traces.workload.run import RunConfig

        key = (model, tuple(sorted(run.items())))
        if key not in self.traces:
            self.traces[key] = generate_trace(model_spec(model), RunConfig(**run),
                                              self.tmp / f"{len(self.traces)}.trace")
        return self.traces[key]

    def per_token(self, model: str, chip: str, *, context: int, batch: int = 1, generate: int = 2) -> dict:
        return self.result(model, chip=chip, context=context, batch=batch, generate=generate)["per_token"]

    def result(self, model: str, *, chip: str | None = None, system: str | None = None, tp: int = 1,
               context: int = 0, prompt: int = 0, generate: int = 2, batch: int = 1, weights: str = "bf16",
               kv: str = "bf16", activations: str = "bf16", quant_group: int | None = None,
               kernel_overhead: str | None = None) -> dict:
        """The ``--json`` of ``tierlab run`` for one setup (a chip, or a system with ``tp``);
        ``kernel_overhead``: ``--kernel-overhead`` (the chip file's when None)."""
        from tierlab.api.settings import Collectives, Execution
        from tierlab.api.targets import load_target_chip, load_target_system

        execution = Execution(kernel_overhead=kernel_overhead)
        run = dict(context=context, prompt=prompt, generate=generate, batch=batch, weights=weights, kv=kv,
                   activations=activations)
        if tp > 1:
            run["tp"] = tp
        if quant_group:
            run["quant_group"] = quant_group
        path = self.trace(model, **run)
        if system is None:
            from tierlab.analysis.result import to_json
            from tierlab.pipeline.chip_replay import replay_trace

            return to_json(replay_trace(path, load_target_chip(chip, execution)))
        from tierlab.analysis.system_result import to_json as system_json
        from tierlab.pipeline.system_replay import replay_system

        return system_json(replay_system(path, load_target_system(system, Collectives(), execution)))


def predict(row: dict, pred: Predictor) -> dict:
    """The prediction for one row of MEASURED: ``roofline``, ``calibrated`` (where the kind has one) and
    the figures the notes use."""
    kind = row["kind"]
    if "predictor" in row:           # a block of rows predicting itself (SERVING_ROWS)
        return ROW_PREDICTORS[row["predictor"]](row, pred)
    setup = {k: row[k] for k in ("chip", "system", "tp", "weights", "kv", "activations", "quant_group", "batch",
                                 "kernel_overhead") if k in row}
    if kind in ("busbw", "collective"):
        from tierlab.analysis.collective_curve import bus_bandwidth, curve
        from tierlab.system.systemfile import load_system

        from tierlab.network.protocols import Settings

        system = load_system(row["system"])
        st = Settings(library=system.collective_library, skew_s=system.collective_skew_s,
                      launch_s=row.get("launch_s", system.chip.execution.kernel_overhead_s))
        (c,) = curve(system, row["ranks"], (row["size"],), settings=st, algorithm=row["algorithm"])
        v = c["bus_bandwidth_gb_s"] if kind == "busbw" else c["time_s"] * 1e6
        r = (bus_bandwidth(row["ranks"], row["size"], c["roofline_time_s"]) / 1e9 if kind == "busbw"
             else c["roofline_time_s"] * 1e6)
        return {"roofline": r, "calibrated": v, "algorithm": c["algorithm"], "protocol": c["protocol"]}
    if kind == "ttft":
        pf = pred.result(row["model"], prompt=row["prompt"], generate=0, **setup)["prefill"]
        return {"roofline": pf["latency_s"] * 1e3, "calibrated": pf["latency_calibrated_s"] * 1e3,
                "bound": pf["bound"], "bound_calibrated": pf["bound_calibrated"]}
    if kind == "tp_scaling":
        hi = pred.result(row["model"], context=row["context"], **setup)["per_token"]
        lo = pred.result(row["model"], context=row["context"], **{**setup, "tp": row["tp_low"]})["per_token"]
        return {"roofline": hi["tokens_per_s"] / lo["tokens_per_s"],
                "calibrated": hi["tokens_per_s_calibrated"] / lo["tokens_per_s_calibrated"]}
    if kind in ("decode", "energy") and ("system" in row or "weights" in row):
        pt = pred.result(row["model"], context=row["context"], **setup)["per_token"]
        if kind == "energy":
            return {"roofline": pt["j_per_token_dynamic"], "calibrated": pt["j_per_token"], "bound": pt["bound"],
                    "basis": pt["energy_board_basis"]}
        return {"roofline": pt["tokens_per_s"], "calibrated": pt["tokens_per_s_calibrated"], "bound": pt["bound"],
                "bound_calibrated": pt["bound_calibrated"], "kernels": pt["kernels"],
                "overhead_s": pt["overhead_s"], "latency_calibrated_s": pt["latency_calibrated_s"]}
    if kind in ("decode", "speed_ratio", "energy"):
        pt = pred.per_token(row["model"], row["chip"], context=row["context"], batch=row.get("batch", 1))
        out = {"roofline": pt["tokens_per_s"], "calibrated": pt["tokens_per_s_calibrated"],
               "bound": pt["bound"], "bound_calibrated": pt["bound_calibrated"], "kernels": pt["kernels"],
               "overhead_s": pt["overhead_s"], "latency_calibrated_s": pt["latency_calibrated_s"]}
        if kind == "energy":
            return {"roofline": pt["j_per_token_dynamic"], "calibrated": pt["j_per_token"], "bound": pt["bound"],
                    "basis": pt["energy_board_basis"]}
        if kind == "speed_ratio":
            other = pred.per_token(row["other"], row["chip"], context=row["context"])
            return {"roofline": pt["tokens_per_s"] / other["tokens_per_s"],
                    "calibrated": pt["tokens_per_s_calibrated"] / other["tokens_per_s_calibrated"]}
        if row.get("measured"):
            # the fixed time per kernel that would close the gap (host-bound runs)
            cal_no_overhead = pt["latency_calibrated_s"] - pt["overhead_s"]
            step_s = row.get("batch", 1) / row["measured"]       # a decode step makes one token per sequence
            out["implied_overhead_per_kernel_s"] = (step_s - cal_no_overhead) / pt["kernels"]
        return out
    spec = model_spec(row["model"])
    if kind == "context":
        from tierlab.analysis.capacity import Budget, capacity

        plan = capacity(spec, Budget.of_size(int(row["memory"]), reserve=row.get("reserve", 0)), weights=row["weights"])
        return {"roofline": plan.memory_context, "calibrated": None, "position_limit": plan.position_limit}
    from tierlab.analysis.capacity import activation_bytes, weight_bytes

    w = weight_bytes(spec, row["weights"])
    return {"roofline": w + spec.kv_bytes_per_token("bf16") * row["context"] + activation_bytes(spec, 1)
            + row.get("reserve", 0), "calibrated": None, "weight_bytes": w}


def rows(selected: list[str] | None = None) -> list[dict]:
    """Every row of MEASURED (or those whose id is in ``selected``) with its prediction and ratio."""
    out = []
    with tempfile.TemporaryDirectory(prefix="tierlab-validate-") as tmp:
        pred = Predictor(Path(tmp))
        for row in MEASURED:
            if selected and row["id"] not in selected:
                continue
            try:
                p = predict(row, pred)
            except UsageError as err:        # a system or chip preset this checkout does not have
                p = {"roofline": None, "calibrated": None, "missing": str(err)}
            best = p["calibrated"] if p.get("calibrated") is not None else p["roofline"]
            ratio = best / row["measured"] if row.get("measured") and best is not None else None
            src, url, date = row["source"]
            band = chip_ratio_band(row["measured"]) if row["kind"] == "chip_ratio" else BAND.get(row["kind"], 0.25)
            if row["kind"] in ABSOLUTE_BAND and best is not None:      # a band in points, not a ratio
                pts = ABSOLUTE_BAND[row["kind"]]
                src, url, date = row["source"]
                out.append({**{k: v for k, v in row.items() if k != "source"}, "source": src, "url": url,
                            "date": date, "predicted": p, "ratio": ratio, "band": band, "band_points": pts,
                            "within_band": bool(abs(best - row["measured"]) <= pts), "within_25": None})
                continue
            out.append({**{k: v for k, v in row.items() if k != "source"}, "source": src, "url": url,
                        "date": date, "predicted": p, "ratio": ratio, "band": band,
                        "within_band": None if ratio is None else (
                            bool(1 / FACTOR_BAND[row["kind"]] <= ratio <= FACTOR_BAND[row["kind"]])
                            if row["kind"] in FACTOR_BAND else bool(1 - band <= ratio <= 1 + band)),
                        "within_25": None if ratio is None else bool(0.75 <= ratio <= 1.25)})
    return out


def _fmt(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "B":
        return f"{v / 1e9:.2f} GB"
    if unit == "J/token":
        return f"{v:.3f}"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def band_text(kind: str, band: float) -> str:
    """A kind's band as people read it: ±N %, ±N points (an absolute band) or a factor."""
    if kind in ABSOLUTE_BAND:
        return f"±{ABSOLUTE_BAND[kind] * 100:.0f} points"
    if kind in FACTOR_BAND:
        return f"x{FACTOR_BAND[kind]:g}"
    return f"±{band * 100:.0f}%"


def summary(table: list[dict]) -> dict:
    """Per kind (and for the aim rows) how many rows with a measurement fall within their band."""
    out = {}
    for r in table:
        if r["within_band"] is None:
            continue
        for key in (r["kind"], *(["aim"] if r.get("aim") else []), *(["systems"] if "system" in r else [])):
            e = out.setdefault(key, {"rows": 0, "within": 0, "band": r["band"]})
            e["rows"] += 1
            e["within"] += int(r["within_band"])
    return out


def text(table: list[dict]) -> str:
    head = ["id", "measured", "unit", "roofline", "calibrated", "ratio", "band", "within"]
    body = [[r["id"], _fmt(r["measured"], r["unit"]), r["unit"], _fmt(r["predicted"]["roofline"], r["unit"]),
             _fmt(r["predicted"].get("calibrated"), r["unit"]),
             "-" if r["ratio"] is None else f"{r['ratio']:.2f}", band_text(r["kind"], r["band"]),
             "-" if r["within_band"] is None else ("yes" if r["within_band"] else "no")] for r in table]
    aim = [r for r in table if r.get("aim") and r["within_band"] is not None]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in [head, ["-" * w for w in widths], *body]]
    lines.append("")
    if aim:
        lines.append(f"bs-1 decode on GPUs (compiled, CUDA graphs; the aim): {sum(r['within_band'] for r in aim)} of "
                     f"{len(aim)} within ±25%")
    for kind, e in summary(table).items():
        lines.append(f"{kind}: {e['within']} of {e['rows']} within {band_text(kind, e['band'])}")
    lines.append("")
    for r in table:
        extra = r["predicted"].get("implied_overhead_per_kernel_s")
        implied = f" Implied overhead per kernel: {extra * 1e6:.1f} us." if extra is not None and extra > 2e-6 else ""
        lines.append(f"{r['id']}: {r['note']}.{implied} Source: {r['source']} {r['url']} ({r['date']})")
    return "\n".join(lines)


def markdown(table: list[dict]) -> str:
    """The table as Markdown (docs/validation.md)."""
    out = ["| id | kind | setup | measured | unit | roofline | calibrated | ratio | band | within |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        setup = ", ".join(f"{k} {r[k]}" for k in ("model", "chip", "system", "tp", "ranks", "size", "context",
                                                   "prompt", "batch", "weights") if k in r)
        out.append(f"| {r['id']} | {r['kind']} | {setup} | {_fmt(r['measured'], r['unit'])} | {r['unit']} | "
                   f"{_fmt(r['predicted']['roofline'], r['unit'])} | {_fmt(r['predicted'].get('calibrated'), r['unit'])} | "
                   + ("-" if r["ratio"] is None else f"{r['ratio']:.2f}") + f" | {band_text(r['kind'], r['band'])} | "
                   + ("-" if r["within_band"] is None else ("yes" if r["within_band"] else "**no**")) + " |")
    return "\n".join(out)


def plot(table: list[dict], path: str) -> None:
    """Left: predicted (calibrated where there is one) against measured, log-log, each kind its
    marker, the diagonal and the ±25 % band (the capacity rows, in bytes and tokens, left out of this
    panel). Right: every row's ratio by kind, with its band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 6), gridspec_kw={"width_ratios": [1, 1.3]})
    done = [r for r in table if r["ratio"] is not None]
    kinds = sorted({r["kind"] for r in done})
    marks = dict(zip(kinds, itertools.cycle("os^Dv<>ph*PXd8H")))   # a marker a kind, however many kinds
    scatter = [r for r in done if r["kind"] not in ("memory", "context")]
    for kind in kinds:
        rs = [r for r in scatter if r["kind"] == kind]
        if rs:
            ax.scatter([r["measured"] for r in rs], [r["measured"] * r["ratio"] for r in rs], marker=marks[kind],
                       s=36, alpha=0.8, label=f"{kind} ({sum(r['within_band'] for r in rs)}/{len(rs)} in band)")
    lo = min(r["measured"] for r in scatter) / 2
    hi = max(r["measured"] for r in scatter) * 2
    ax.plot([lo, hi], [lo, hi], "k-", lw=1)
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="grey", alpha=0.15, label="±25%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (the row's unit: tok/s, ms, us, GB/s, J/token, x)")
    ax.set_ylabel("tierlab predicted (calibrated where it has one)")
    ax.set_title("predicted against measured")
    ax.legend(fontsize=8, loc="upper left")
    x = 0
    ticks, labels = [], []
    for kind in kinds:
        rs = [r for r in done if r["kind"] == kind]
        xs = list(range(x, x + len(rs)))
        b = rs[0]["band"]
        ax2.fill_between([x - 0.4, x + len(rs) - 0.6], 1 - b, 1 + b, color="grey", alpha=0.15, lw=0)
        ax2.scatter(xs, [r["ratio"] for r in rs], marker=marks[kind], s=30,
                    c=["tab:green" if r["within_band"] else "tab:red" for r in rs])
        ticks.append(x + (len(rs) - 1) / 2)
        labels.append(kind)
        x += len(rs) + 1
    ax2.axhline(1.0, color="k", lw=1)
    ax2.set_yscale("log")
    ax2.set_xticks(ticks)
    ax2.set_xticklabels(labels, rotation=30, ha="right", fontsize=9)
    ax2.set_ylabel("predicted / measured")
    ax2.set_title("every row's ratio, its band shaded (green: within)")
    fig.suptitle("benchmarks/validate.py", fontsize=11)
    fig.tight_layout()
    from tierlab.common.atomic import atomic_path

    with atomic_path(path, force=True) as tmp:      # a figure is redrawn in place
        fig.savefig(tmp, dpi=100, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--plot", default=None, metavar="FILE", help="draw predicted against measured (PNG)")
    ap.add_argument("--only", default=None, help="comma-separated row ids")
    a = ap.parse_args(argv)
    table = rows(a.only.split(",") if a.only else None)
    if a.plot:
        plot(table, a.plot)
    if a.json:
        print(json.dumps({"rows": table, "summary": summary(table)}, indent=2))
    else:
        print(markdown(table) if a.markdown else text(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
