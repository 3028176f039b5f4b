"""Layers of one model on several Python threads at once (one layer per thread, the C API's rule):
the same bits as the serial runs. ctypes releases the GIL during each call."""

import threading

import ml_dtypes
import numpy as np

from conftest import LINEAR, MODEL, MOE_PREFIX


def test_layers_on_threads_give_the_serial_results(fp4cl, context, checkpoints):
    path = checkpoints.get("nvfp4", "compressed-tensors")
    rng = np.random.default_rng(41)
    xs = [rng.standard_normal((3, MODEL["hidden"])).astype(ml_dtypes.bfloat16) for _ in range(4)]
    ids = rng.integers(0, MODEL["experts"], (3, MODEL["topk"])).astype(np.int32)
    w = rng.uniform(0, 1, ids.shape).astype(np.float32)
    with context.open(path) as model:
        serial_lin = model.linear(LINEAR)
        serial_moe = model.moe(MOE_PREFIX)
        expected = [(serial_lin.run(x), serial_moe.run(x, ids, w)) for x in xs]
        results, errors = [None] * len(xs), []

        def work(i):
            try:
                with model.linear(LINEAR) as lin, model.moe(MOE_PREFIX) as moe:
                    results[i] = [(lin.run(xs[i]), moe.run(xs[i], ids, w)) for _ in range(3)]
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i, runs in enumerate(results):
            for y_lin, y_moe in runs:
                assert np.array_equal(y_lin.view(np.uint16), expected[i][0].view(np.uint16))
                assert np.array_equal(y_moe.view(np.uint16), expected[i][1].view(np.uint16))
        serial_lin.close()
        serial_moe.close()
