"""The real torch.profiler (Kineto) traces under tests/data/kineto (see its
README), by short name: the Kineto import's tests and the export's read them."""

import pathlib

DATA = pathlib.Path(__file__).parent / "data" / "kineto"
TRACES = {
    "rocm": "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "alexnet": "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "event_sync": "critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "multi_stream": "critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    "nccl": "nccl_parser_config/nccl_data.json.gz",
    "rank0": "trace_filter/sampled_rank-0.json.gz",
    "rank1": "trace_filter/sampled_rank-1.json.gz",
    "triton": "triton_example/triton_example.json.gz",
}
