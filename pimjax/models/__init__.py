"""Full-size LLM decoder layers from shapes alone, and the decode loop timed per phase.

* `configs` -- the vendored model table (`get_config`, `CONFIGS`, `ModelConfig`)
* `layers`  -- one decoder layer in plain jnp (`make_layer`, `layer_shapes`)
* `inference` -- the decode loop: per-phase times per token for GPU, AttAcc-Base,
  AttAcc-Full and pimjax (`decode`, `DecodeResult`), and the AttAcc system-model
  check (`attacc_end_to_end`)
* `serving` -- LLM serving on GPU + PIM: request traces, continuous / static batching,
  paged KV caches in the PIM stacks, step times from compiled kernels (`serve`,
  `ServeResult`; traces: `serving.poisson_requests`, `serving.requests_from`)
* `cnn`     -- PIMFlow's models in plain jnp (MobileNet-V2, EfficientNet-B0, MnasNet,
  ResNet-50, VGG-16, BERT-base): `get_cnn_config`, `init`, `make_apply`, the layer table
  traced from shapes (`cnn_layers`, `layer_records`), pipelining patterns (`find_patterns`)
"""
from .configs import CONFIGS, ModelConfig, get_config
from .layers import PHASES, layer_shapes, make_layer, param_shapes
from .inference import SYSTEMS, DecodeResult, attacc_end_to_end, decode
from .serving import Requests, ServeResult, ServingObjective, batch_requests, poisson_requests, requests_from, serve
from .cnn import (CNN_MODELS, PATTERNS, CNNConfig, Layer, Pattern, cnn_layers, find_patterns, get_cnn_config,
                  init, layer_records, make_apply)

__all__ = ["CONFIGS", "ModelConfig", "get_config", "PHASES", "layer_shapes", "make_layer", "param_shapes",
           "SYSTEMS", "DecodeResult", "attacc_end_to_end", "decode",
           "serve", "ServeResult", "ServingObjective", "Requests", "poisson_requests", "requests_from", "batch_requests",
           "CNN_MODELS", "PATTERNS", "CNNConfig", "Layer", "Pattern", "cnn_layers", "find_patterns",
           "get_cnn_config", "init", "layer_records", "make_apply"]
