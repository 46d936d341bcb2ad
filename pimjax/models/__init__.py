"""Models in plain jnp, built from shapes alone: what the studies (`pimjax.studies`) and the
tests trace.  Nothing here imports the compiler (`api`, `plan`, `search`, `report`).

* `configs` -- the vendored model table (`get_config`, `CONFIGS`, `ModelConfig`)
* `layers`  -- one decoder layer in plain jnp (`make_layer`, `layer_shapes`, `decode_attention`)
* `cnn`     -- PIMFlow's models in plain jnp (MobileNet-V2, EfficientNet-B0, MnasNet,
  ResNet-50, VGG-16, BERT-base): `get_cnn_config`, `init`, `make_apply`, the layer table
  traced from shapes (`cnn_layers`, `layer_records`), pipelining patterns (`find_patterns`)

The decode loop timed per phase (`decode`) and the serving simulator (`serve`) are studies:
`pimjax.studies`.
"""
from .cnn import (
                  CNN_MODELS,
                  PATTERNS,
                  CNNConfig,
                  Layer,
                  Pattern,
                  cnn_layers,
                  find_patterns,
                  get_cnn_config,
                  init,
                  layer_records,
                  make_apply,
)
from .configs import CONFIGS, ModelConfig, get_config
from .layers import PHASES, decode_attention, layer_shapes, make_layer, param_shapes

__all__ = ["CONFIGS", "ModelConfig", "get_config", "PHASES", "decode_attention", "layer_shapes", "make_layer",
           "param_shapes", "CNN_MODELS", "PATTERNS", "CNNConfig", "Layer", "Pattern", "cnn_layers", "find_patterns",
           "get_cnn_config", "init", "layer_records", "make_apply"]
