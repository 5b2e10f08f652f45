"""Where each emitted value's unit, scope and meaning are defined: engine files at a commit.

Every emitted size or setting cites one of these next to its value. The commits are those of
the engine sources read when the writers were built (2026-12); the key lists the tests check
against are in tests/fixtures/engine_keys/ with the same sources.
"""

LMCACHE_KEYS = "LMCache lmcache/v1/config.py@000620e (_CONFIG_DEFINITIONS)"
LMCACHE_CPU = (
    "LMCache lmcache/v1/storage_backend/local_cpu_backend.py: one LocalCPUBackend per worker "
    "process, max_local_cpu_size * 1024**3 bytes (GiB) for that rank's KV chunks"
)
LMCACHE_DISK = (
    "LMCache lmcache/v1/storage_backend/local_disk_backend.py@005121a: max_local_disk_size * "
    "1024**3 bytes (GiB) per cache engine, one per worker; local_disk_path_sharding by_gpu"
)
LMCACHE_FS = (
    "LMCache lmcache/v1/storage_backend/connector/fs_adapter.py@0e65d2f: remote_url fs://host:port/"
    "path, FSConnector uses the path"
)
LMCACHE_MOONCAKE = (
    "LMCache lmcache/v1/storage_backend/connector/mooncakestore_adapter.py@0e65d2f: remote_url "
    "mooncakestore://host:port, one host"
)
LMCACHE_MOONCAKE_CONFIG = (
    "LMCache lmcache/v1/storage_backend/connector/mooncakestore_connector.py@01aed92: "
    "MooncakeStoreConfig.load_from_lmcache_config (extra_config; protocol defaults to tcp)"
)
LMCACHE_CHUNK = "LMCache docs/source/api_reference/configurations.rst@0223da8 (chunk_size 256)"
SGLANG_HOST_POOL = (
    "SGLang python/sglang/srt/mem_cache/memory_pool_host.py: host pool = hicache_size * 1e9 // "
    "bytes per token of this rank, one pool per TP rank process, and it must exceed the device "
    "pool; --hicache-size is an int in GB (arg_groups/fields/memory.py@00fe477)"
)
SGLANG_BEST = "SGLang docs/advanced_features/hicache_best_practices.md@0712681"
SGLANG_MEMORY = "SGLang python/sglang/srt/arg_groups/fields/memory.py@00fe477"
SGLANG_FILE = (
    "SGLang python/sglang/srt/mem_cache/hicache_storage.py@bb424de (HiCacheFile: directory from "
    "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, default /tmp/hicache, no size bound)"
)
SGLANG_MOONCAKE = (
    "Mooncake docs/source/deployment/integrations/sglang/hicache-integration-v1.md@3b5a594 "
    "(page_first or page_first_direct required; SGLANG_HICACHE_MOONCAKE_CONFIG_PATH)"
)
SGLANG_DISAGG = "SGLang python/sglang/srt/arg_groups/fields/disagg.py@07a7b67"
SGLANG_PARALLEL = "SGLang python/sglang/srt/arg_groups/fields/parallel.py@00ac710"
SGLANG_SCHEDULE = "SGLang python/sglang/srt/arg_groups/fields/schedule.py@144437f"
SGLANG_MLA = "SGLang python/sglang/srt/server_args.py@469c63e"
KVBM_SCOPE = (
    "Dynamo lib/llm/src/block_manager/distributed/leader.rs@ae2223b: blocks = "
    "DYN_KVBM_*_CACHE_GB * 1e9 / bytes per block, summed over the TP workers of one engine "
    "instance"
)
KVBM_GUIDE = "Dynamo docs/components/kvbm/kvbm-guide.md@839750d"
KVBM_DIR = "Dynamo lib/kvbm-config/src/v1_compat.rs@5954806 (DYN_KVBM_DISK_CACHE_DIR)"
# The worker's role: args.py reads the enum (decode: no KV events; prefill: requires
# --kv-transfer-config); backend_args.py's DynamoVllmArgGroup defines the flag, whose
# --is-prefill-worker / --is-decode-worker predecessors are deprecated.
DYNAMO_WORKER_ROLE = (
    "Dynamo components/src/dynamo/vllm/args.py@000a36a: --disaggregation-mode agg (default) | "
    "prefill | decode | encode; a decode worker publishes no KV events, a prefill worker needs "
    "--kv-transfer-config"
)
KVBM_CONNECTORS = (
    "Dynamo components/src/dynamo/vllm/args.py@000a36a: --connector is rejected for vLLM; "
    "--kv-transfer-config names DynamoConnector (kvbm.vllm_integration.connector) and "
    "NixlConnector, both under PdConnector (_connector_to_kv_transfer_json)"
)
MOONCAKE_MASTER = "Mooncake mooncake-store/src/master.cpp@3b5a594"
MOONCAKE_STORE = (
    "Mooncake mooncake-store/src/real_client_main.cpp@3b5a594 (--global_segment_size: the memory "
    "this node gives the pool; a size with a unit is read as GiB, utils.h string_to_byte_size)"
)
MOONCAKE_CONFIG = "Mooncake mooncake-wheel/mooncake/mooncake_config.py@3b5a594"
MOONCAKE_SSD = "Mooncake docs/source/deployment/ssd/ssd-offload.md@3b5a594"
MOONCAKE_VLLM = (
    "Mooncake docs/source/deployment/integrations/vllm/vllm-mooncakestoreconnector.md@3b5a594"
)
VLLM_CACHE = "vLLM vllm/config/cache.py@002f10e"
# `vllm serve --model M` serves M when no positional model is given (vllm/entrypoints/cli/
# serve.py: the positional model_tag, when given, replaces args.model).
VLLM_MODEL_FLAG = "vLLM vllm/config/model.py@0052a5b ModelConfig.model, vllm serve --model"
VLLM_OFFLOAD = (
    "vLLM vllm/config/cache.py@002f10e: kv_offloading_size in GiB, the total over the TP ranks "
    "of one instance; vllm/config/vllm.py _post_init_kv_transfer_config turns it into "
    "OffloadingConnector with cpu_bytes_to_use = size * 2**30 and replaces kv_connector"
)
VLLM_BATCH_DEFAULTS = (
    "vLLM vllm/engine/arg_utils.py@99d7eb5 (EngineArgs._set_default_args: vllm serve takes "
    "8,192 on GPUs of at least 70 GiB other than the A100, else 2,048)"
)
VLLM_PARALLEL = (
    "vLLM vllm/config/parallel.py@00193b8 (data parallel is for MoE; dense models run "
    "independent instances)"
)
VLLM_DISAGG = "vLLM docs/features/disagg_prefill.md@0047fb9 and the NixlConnector usage guide"
