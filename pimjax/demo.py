"""The main job (`make demo`).  Until pim_jit lands: trace a small MLP and
print its PimGraph."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .trace.frontend import make_graph


def mlp(params, x):
    """2-layer MLP: relu(W1 x + b1) -> W2 h + b2."""
    h = jax.nn.relu(params["W1"] @ x + params["b1"])
    return params["W2"] @ h + params["b2"]


def main() -> None:
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {"W1": jax.random.normal(k[0], (512, 256)), "b1": jnp.zeros(512),
              "W2": jax.random.normal(k[1], (128, 512)), "b2": jnp.zeros(128)}
    x = jax.random.normal(k[2], (256,))
    graph = make_graph(mlp, params, x)
    print(graph.as_text())
    err = float(jnp.max(jnp.abs(graph.evaluate(params, x) - mlp(params, x))))
    print(f"\n{len(graph.ops)} ops; max |evaluate - jnp| = {err:.2e}")


if __name__ == "__main__":
    main()
