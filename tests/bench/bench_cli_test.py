"""fp4cl-bench from the command line: argument errors, the output formats, and a tuning run.

Usage: bench_cli_test.py PATH/TO/fp4cl-bench

Shapes are tiny and iteration counts 1: the test checks what the tool prints and writes, never
how fast anything ran.
"""
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

BENCH = None


def run(*args, env=None, check=None):
    """Runs fp4cl-bench; returns (exit status, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([BENCH, *args], capture_output=True, text=True, env=full_env, timeout=240)
    if check is not None and p.returncode != check:
        raise AssertionError(f"fp4cl-bench {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


FAST = ["--iters", "1", "--warmup", "0", "--warmup-ms", "0", "--rotate-mib", "1", "--stream-mib", "16"]
TINY_LINEAR = ["linear", "-n", "64", "-k", "256", *FAST]
TINY_MOE = ["moe", "--hidden", "64", "--inter", "64", "--experts", "4", "--topk", "2", *FAST]


class ArgumentErrors(unittest.TestCase):
    def expect_error(self, args, *fragments):
        code, out, err = run(*args)
        self.assertNotEqual(code, 0, f"{args} succeeded:\n{out}")
        text = out + err
        for f in fragments:
            self.assertIn(f, text, f"{args}: '{f}' not in:\n{text}")

    def test_subcommand_is_required(self):
        self.expect_error([], "subcommand")
        self.expect_error(["warp"], "subcommand")

    def test_bad_values_are_named(self):
        self.expect_error(TINY_LINEAR + ["--scheme", "nvfp8"], "unknown --scheme 'nvfp8'", "mxfp4-w4a16")
        self.expect_error(TINY_LINEAR + ["--kernel", "turbo"], "unknown --kernel 'turbo'", "gemv_rows")
        self.expect_error(TINY_LINEAR + ["--tokens", "0"], "--tokens")
        self.expect_error(TINY_LINEAR + ["--tokens", "1,x"], "--tokens")
        self.expect_error(["linear", "--preset", "llama"], "unknown --preset 'llama'", "qwen3-30b-a3b")
        self.expect_error(["linear", "--preset", "qwen3-30b-a3b", "-n", "64"], "either --preset or -n/-k")
        self.expect_error(TINY_LINEAR + ["--output", "fp16"], "--output must be bf16 or fp32")
        self.expect_error(TINY_LINEAR + ["--tune", "GEMV_TOKENS"], "--tune takes NAME=INTEGER")
        self.expect_error(TINY_LINEAR + ["--kernel", "gemv_rows", "--tune", "GEMV_TOKEN=4"],
                          "unknown parameter 'GEMV_TOKEN'")
        self.expect_error(TINY_LINEAR + ["--csv", "--json"], "excludes")
        self.expect_error(TINY_LINEAR + ["--warmup-ms", "-1"], "--warmup-ms")
        self.expect_error(["tune", "--linear", "64x256", "--warmup-ms", "x"], "--warmup-ms")
        self.expect_error(["moe", "--hidden", "64", "--inter", "64"], "needs all of --hidden, --inter, --experts and --topk")
        self.expect_error(TINY_MOE + ["--routings", "0"], "--routings")
        self.expect_error(["moe", "--hidden", "64", "--inter", "64", "--experts", "2", "--topk", "4"],
                          "--topk 4 exceeds --experts 2")
        self.expect_error(TINY_MOE + ["--activation", "gelu"], "--activation must be swiglu or gpt-oss, got 'gelu'")
        self.expect_error(["quant", "--kernel", "gemv_rows"], "one kernel, 'quantize'")
        self.expect_error(["quant", "--cols", "40", "--scheme", "mxfp4-w4a4", "--iters", "1"],
                          "not a multiple of the MXFP4 block size 32")
        self.expect_error(["tune", "--linear", "64x256", "--tokens", "0"], "--tokens")
        self.expect_error(["tune", "--linear", "64by256"], "--linear takes NxK")
        self.expect_error(["tune", "--op", "conv", "--linear", "64x256"], "--op takes linear and/or moe")
        self.expect_error(["tune"], "nothing to tune")
        self.expect_error(["tune", "--op", "linear", "--linear", "64x256", "--kernel", "mma"],
                          "--kernel names MoE strategies: it needs --op moe")
        self.expect_error(["tune", "--op", "moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk", "2",
                           "--kernel", "tensor"], "unknown MoE strategy 'tensor'", "grouped, decode, split, mma")
        self.expect_error(["--device", "no-such-device", "stream", "--mib", "1"], "no-such-device")
        self.expect_error(["stream", "--probes", "0"], "--probes")
        self.expect_error(["stream", "--iters", "0"], "--iters")
        self.expect_error(["stream", "--mib", "0.5"], "--mib")


class Outputs(unittest.TestCase):
    def test_table_names_every_row_and_how_to_reproduce_it(self):
        _, out, _ = run(*TINY_LINEAR, "--tokens", "1,2", "--kernel", "gemv_rows,gemm_tiled", check=0)
        self.assertIn("peaks (this run): stream read", out)
        self.assertIn("fp32 FMA", out)
        self.assertEqual(out.count("$ fp4cl-bench linear -n 64 -k 256"), 4, out)
        self.assertIn("ok: ", out)

    def test_all_kernels_skips_those_that_cannot_serve_the_scheme(self):
        # Under FP4CL_W4A16_INT=0 gemv_int refuses BF16 activations (W4A16). Under "all" it is then
        # skipped with a note; named, it fails.
        off = {"FP4CL_W4A16_INT": "0"}
        _, out, err = run(*TINY_LINEAR, "--tokens", "1", "--scheme", "nvfp4-w4a16", "--kernel", "all", env=off, check=0)
        self.assertIn("skipped kernel gemv_int for 64x256 nvfp4-w4a16", err)
        self.assertIn("gemv_rows", out)
        self.assertNotRegex(out, r"\bgemv_int\b")
        code, out, err = run(*TINY_LINEAR, "--tokens", "1", "--scheme", "nvfp4-w4a16", "--kernel", "all,gemv_int",
                             env=off)
        self.assertNotEqual(code, 0, out)
        self.assertIn("FP4CL_W4A16_INT=0", err)

    def test_gpt_oss_activation_is_checked_and_reproduced(self):
        # gpt-oss's clamped SwiGLU with expert biases: checked against the reference like any row,
        # named in the row's details, and kept in the reproduction command.
        _, out, _ = run(*TINY_MOE, "--tokens", "1,3", "--activation", "gpt-oss", check=0)
        self.assertEqual(out.count("ok: "), 2, out)
        self.assertEqual(out.count("gpt-oss's clamped SwiGLU and expert biases"), 2, out)
        self.assertEqual(out.count("--activation gpt-oss"), 2, out)

    def test_router_logits_are_routed_checked_and_reproduced(self):
        # Router logits routed on the device (softmax top-k, DeepSeek-V3's gate: 16 experts in its
        # 8 groups), checked against the reference's routing of them, named and reproduced.
        moe16 = ["moe", "--hidden", "64", "--inter", "64", "--experts", "16", "--topk", "4", *FAST]
        for router, named in (("softmax", "router logits (softmax top-k)"),
                              ("deepseek-v3", "router logits (DeepSeek-V3's gate)")):
            _, out, _ = run(*moe16, "--tokens", "1,5", "--router", router, check=0)
            self.assertEqual(out.count("ok: "), 2, out)
            self.assertEqual(out.count(named), 2, out)
            self.assertEqual(out.count("--router " + router), 2, out)
        _, out, _ = run(*moe16, "--tokens", "1,5", "--router", "deepseek-v3", "--shared-experts", "1", check=0)
        self.assertEqual(out.count("ok: "), 2, out)
        self.assertEqual(out.count("; 1 shared expert(s)"), 2, out)
        self.assertEqual(out.count("--shared-experts 1"), 2, out)
        for args, fragment in (([*TINY_MOE, "--router", "deepseek-v3"], "groups = 8 must divide the 4 global experts"),
                               ([*TINY_MOE, "--router", "sigmoid"], "--router")):
            code, out, err = run(*args)
            self.assertNotEqual(code, 0, out)
            self.assertIn(fragment, out + err)

    def test_csv(self):
        _, out, _ = run(*TINY_LINEAR, "--tokens", "1,3", "--scheme", "nvfp4-w4a16,mxfp4-w4a4", "--csv", check=0)
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(len(rows), 4)
        for r in rows:
            self.assertEqual(r["op"], "linear")
            self.assertTrue(r["check"].startswith("ok"), r)
            self.assertGreater(float(r["us_median"]), 0)
            self.assertGreater(float(r["stream_gbps"]), 0)
            self.assertGreater(float(r["fma_gflops"]), 0)
            # Bytes of prepared weights and 2·m·n·k flops per call.
            self.assertGreater(float(r["weight_bytes"]), 64 * 256 / 2)
            self.assertAlmostEqual(float(r["gbps"]), float(r["weight_bytes"]) / float(r["us_median"]) * 1e-3, places=3)
            self.assertIn("--tokens " + r["tokens"], r["command"])
            self.assertIn("--warmup-ms 0", r["command"])  # not the default: the reproduction repeats it
            # --warmup 0 and no time: one warm-up call per rotated copy of the weights.
            self.assertGreaterEqual(int(r["warmup_calls"]), 1)
        self.assertEqual({r["scheme"] for r in rows}, {"nvfp4-w4a16", "mxfp4-w4a4"})

    def test_json_moe_counts_only_experts_with_tokens(self):
        _, out, _ = run(*TINY_MOE, "--tokens", "1,4", "--kernel", "all", "--json", check=0)
        report = json.loads(out)
        self.assertGreater(report["peaks"]["stream_gbps"], 0)
        rows = report["rows"]
        self.assertEqual(len(rows), 8)  # 4 strategies x 2 token counts (mma emulated off NVIDIA)
        # The stream read measured three times before the rows, after each and at the end; the
        # highest kept.
        self.assertEqual(report["peaks"]["stream_probes"], 3 + len(rows) + 1)
        self.assertEqual({r["kernel"] for r in rows}, {"decode", "grouped", "split", "mma"})
        for r in rows:
            self.assertTrue(r["check"].startswith("ok"), r)
            self.assertEqual(r["flops"], 2 * r["tokens"] * 2 * 3 * 64 * 64)
            self.assertGreaterEqual(r["warmup_calls"], 1)
        one = [r for r in rows if r["tokens"] == 1][0]
        four = [r for r in rows if r["tokens"] == 4][0]
        # One token reaches 2 experts; four tokens at most all 4: bytes grow with the experts used.
        self.assertLess(one["weight_bytes"], four["weight_bytes"])
        self.assertLessEqual(four["weight_bytes"], 2 * one["weight_bytes"] + 1e-6)

    def test_moe_routings_sets_the_routings_a_row_cycles_through(self):
        _, out, _ = run(*TINY_MOE, "--tokens", "3", "--routings", "5", "--json", check=0)
        row = json.loads(out)["rows"][0]
        self.assertIn("5 routings x", row["detail"])
        # The tiles that served the row and where they come from (MoeLayer::kernel_description).
        self.assertRegex(row["detail"], r"^(decode|grouped|split|mma): tile_m \d+, local sizes \d+ and \d+")
        self.assertIn("[built-in]", row["detail"])
        self.assertIn("--routings 5", row["command"])
        self.assertTrue(row["check"].startswith("ok"), row)
        # Without it, as many as the rotation span needs, up to 64: this tiny layer's calls read far
        # less than 1 MiB, so several (35 on PoCL, 38 on an H200: the bytes of the device's layout).
        _, out, _ = run(*TINY_MOE, "--tokens", "3", "--json", check=0)
        row = json.loads(out)["rows"][0]
        routings = re.search(r"(\d+) routings x", row["detail"])
        self.assertIsNotNone(routings, row["detail"])
        self.assertTrue(20 <= int(routings.group(1)) <= 64, row["detail"])
        self.assertNotIn("--routings", row["command"])

    def test_moe_launches_breaks_down_calls_of_their_own(self):
        # --launches: the per-command breakdown on stderr, from calls with an event on every launch,
        # and beside it the row's time, which stays that of the calls without them.
        _, out, err = run(*TINY_MOE, "--tokens", "3", "--json", "--launches", check=0)
        row = json.loads(out)["rows"][0]
        self.assertTrue(row["check"].startswith("ok"), row)
        self.assertIn("T=3: ", err)
        self.assertIn("from the first command's start to the last one's end", err)
        # Each command with its size: work-groups and their work-items, or the work-items alone
        # where the driver chose the work-group size.
        size = r"[1-9][0-9]* work-(?:groups of [1-9][0-9]*|items)"
        commands = re.findall(r"^ +[0-9.]+ us \+ +[0-9.]+ us  (moe_\w+) \((" + size + r")\)$", err, re.MULTILINE)
        self.assertGreaterEqual(len(commands), 2, err)
        self.assertTrue(any("fc1" in name for name, _ in commands), err)
        self.assertTrue(any("work-groups of" in size for _, size in commands), err)
        m = re.search(r"the row's time, without an event on every launch: ([0-9.]+) us \(median\)", err)
        self.assertIsNotNone(m, err)
        self.assertAlmostEqual(float(m.group(1)), row["us_median"], delta=0.051)
        # Without --launches, no breakdown.
        _, _, err = run(*TINY_MOE, "--tokens", "3", "--json", check=0)
        self.assertNotIn("without an event on every launch", err)
        self.assertNotIn("from the first command's start", err)

    def test_moe_tiles_times_each_setting_with_its_own_layer(self):
        # --tiles: one layer per FP4CL_MOE_TILES setting over the same experts, each row checked,
        # described with the setting's parameters and reproduced with the variable set.
        _, out, _ = run(*TINY_MOE, "--tokens", "3", "--kernel", "mma", "--tiles", "mma.unroll=2;mma.unroll=4",
                        "--json", check=0)
        rows = json.loads(out)["rows"]
        self.assertEqual(len(rows), 2, rows)
        for row, unroll in zip(rows, (2, 4)):
            self.assertTrue(row["check"].startswith("ok"), row)
            self.assertIn(f"unroll {unroll}, ", row["detail"])
            self.assertIn("[FP4CL_MOE_TILES]", row["detail"])
            self.assertTrue(row["command"].startswith(f"FP4CL_MOE_TILES='mma.unroll={unroll}' fp4cl-bench moe "),
                            row["command"])
        # --tiles overrides the variable for every scheme's layers; without --tiles the variable as
        # the process found it serves, and the reproduction does not set it.
        _, out, _ = run(*TINY_MOE, "--tokens", "3", "--kernel", "mma", "--scheme", "nvfp4-w4a16,nvfp4-w4a4",
                        "--tiles", "mma.unroll=2", "--json", env={"FP4CL_MOE_TILES": "mma.unroll=8"}, check=0)
        rows = json.loads(out)["rows"]
        self.assertEqual([("unroll 2, " in r["detail"]) for r in rows], [True, True], rows)
        _, out, _ = run(*TINY_MOE, "--tokens", "3", "--kernel", "mma", "--json", env={"FP4CL_MOE_TILES": "mma.unroll=8"},
                        check=0)
        row = json.loads(out)["rows"][0]
        self.assertIn("unroll 8, ", row["detail"])
        self.assertFalse(row["command"].startswith("FP4CL_MOE_TILES"), row["command"])
        code, out, err = run(*TINY_MOE, "--kernel", "mma", "--tiles", "mma.unroll=2;mma.unroll=3")
        self.assertNotEqual(code, 0, out)
        self.assertIn("--tiles setting 'mma.unroll=3'", err)
        self.assertIn("unroll = 3 must be 1, 2, 4 or 8", err)
        code, out, err = run(*TINY_MOE, "--tiles", "mma.unroll=2;;mma.unroll=4")
        self.assertNotEqual(code, 0, out)
        self.assertIn("--tiles: an empty setting", err)

    def test_quant_is_checked_bit_exactly(self):
        _, out, _ = run("quant", "--cols", "256", "--tokens", "1,5", *FAST, "--csv", check=0)
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(len(rows), 4)
        for r in rows:
            self.assertIn("bit-exact", r["check"])

    def test_plot_is_a_standalone_svg(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plot.svg")
            run(*TINY_LINEAR, "--tokens", "1,2,4", "--plot", path, check=0)
            root = ET.parse(path).getroot()
            self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
            ns = {"s": "http://www.w3.org/2000/svg"}
            self.assertEqual(len(root.findall("s:circle", ns)), 3)  # one point per row
            titles = " ".join(t.text for t in root.iter("{http://www.w3.org/2000/svg}title"))
            self.assertIn("roofline", titles)

    def test_stream_reports_the_best_configuration_of_the_best_probe(self):
        _, out, _ = run("stream", "--mib", "16", "--iters", "2", "--probes", "3", check=0)
        probes = [l for l in out.splitlines() if l.startswith("probe ")]
        self.assertEqual(len(probes), 3, out)
        best = 0.0
        for line in probes:
            # "probe 1: 41.2 GB/s (... ) (medians of 2, GB/s: 2 x 1: 40.10, 8 x 1: 41.23, 32 x 1: 40.97)"
            gbps = float(line.split(": ", 1)[1].split(" GB/s")[0])
            configs = line.rsplit("GB/s: ", 1)[1].rstrip(")").split(", ")
            # CPU devices: 1, 4 and 16 work-items per compute unit; GPUs: one grid
            self.assertIn(len(configs), (1, 3), line)
            medians = [float(c.rsplit(": ", 1)[1]) for c in configs]
            self.assertAlmostEqual(gbps, max(medians), delta=0.051, msg=line)
            best = max(best, gbps)
        summary = [l for l in out.splitlines() if l.startswith("stream read:")][0]
        self.assertAlmostEqual(float(summary.split(": ", 1)[1].split(" GB/s")[0]), best, delta=0.051)
        self.assertIn("the highest of 3 probes", summary)
        # One configuration alone where --items names it.
        _, out, _ = run("stream", "--mib", "16", "--iters", "1", "--items", "4", check=0)
        self.assertIn("4 work-items", [l for l in out.splitlines() if l.startswith("stream read:")][0])

    def test_stream_buffer_on_huge_pages_unless_switched_off(self):
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                thp = "[never]" not in f.read()
        except OSError:
            thp = False
        _, out, _ = run("devices", check=0)
        if not thp or "CPU" not in out:
            self.skipTest("no transparent huge pages, or not a CPU device")
        _, out, _ = run("stream", "--mib", "16", "--iters", "1", check=0)
        self.assertIn("on huge pages", out)
        _, out, _ = run("stream", "--mib", "16", "--iters", "1", env={"FP4CL_HUGE_PAGES": "0"}, check=0)
        self.assertNotIn("on huge pages", out)

    def test_stream_and_devices(self):
        _, out, _ = run("stream", "--mib", "8", "--iters", "1", "--fma", check=0)
        self.assertIn("stream read:", out)
        self.assertIn("fp32 FMA:", out)
        _, out, _ = run("devices", check=0)
        self.assertIn("tuning databases:", out)
        if "      CPU, " in out:  # PoCL keeps fp32 denormals: the probe's verdict and the decode it picks
            self.assertRegex(out, r"fp32 denormals kept; multiplies with them [0-9.]+x the time of normal ones "
                                  r"on this processor: by default the MoE kernels decode E2M1 to "
                                  r"(exact values|fp32 subnormals)")
            # Whether the kernels take AVX-512 BF16 dot products there: the processor, then the probe
            # kernel built by the device's compiler. A compiler that refuses it (here every build
            # fails, injected) is named as the reason.
            self.assertRegex(out, r"AVX-512 BF16 dot products: (used \(its OpenCL compiler builds them|not used)")
            if "AVX-512 BF16 dot products: used" in out:
                _, refused, _ = run("devices", env={"FP4CL_FAULT_INJECT": "calls=build,at=1,every=1,status=-11"},
                                    check=0)
                self.assertIn("AVX-512 BF16 dot products: not used: its OpenCL compiler does not build them: "
                              "building bf16_dot_probe.cl", refused)


class Tuning(unittest.TestCase):
    def test_tune_writes_a_database_the_library_loads(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuning.json")
            _, out, err = run("tune", "--op", "linear", "--linear", "64x256", "--scheme", "nvfp4-w4a4",
                              "--tokens", "1,3", "--iters", "1", "--warmup-ms", "0", "--passes", "1", "--output", path,
                              check=0)
            self.assertIn("written to " + path, out)
            with open(path) as f:
                db = json.load(f)
            self.assertEqual(db["schema"], "fp4cl-tuning")
            self.assertEqual(db["version"], 1)
            self.assertEqual(len(db["devices"]), 1)
            device = db["devices"][0]["device"]
            for key in ("platform", "vendor", "name", "driver", "compute_units", "kind"):
                self.assertIn(key, device)
            entries = db["devices"][0]["entries"]
            self.assertEqual(sorted(e["tokens"] for e in entries), [1, 3])  # a bucket need not be a power of two
            for e in entries:
                self.assertEqual(e["shape"], {"n": 64, "k": 256})
                self.assertEqual(e["scheme"], "nvfp4-w4a4")
                self.assertTrue(e["params"], e)
            # A second run merges into the file (same keys replaced, none duplicated).
            run("tune", "--op", "linear", "--linear", "64x256", "--scheme", "nvfp4-w4a4", "--tokens", "3",
                "--iters", "1", "--warmup-ms", "0", "--passes", "1", "--output", path, check=0)
            with open(path) as f:
                self.assertEqual(len(json.load(f)["devices"][0]["entries"]), 2)
            # The library loads it: the benchmark's kernel description names the tuned bucket.
            _, out, _ = run(*TINY_LINEAR, "--scheme", "nvfp4-w4a4", "--tokens", "1", check=0,
                            env={"FP4CL_TUNING_FILE": path})
            self.assertIn("[tuned bucket 1 (" + path, out)
            _, out, _ = run(*TINY_LINEAR, "--scheme", "nvfp4-w4a4", "--tokens", "3", check=0,
                            env={"FP4CL_TUNING_FILE": path})
            self.assertIn("tuned bucket 3 (" + path, out)
            _, out, _ = run("devices", env={"FP4CL_TUNING_FILE": path}, check=0)
            self.assertIn(path, out)
            # --replace drops this device's earlier entries but keeps another device's.
            with open(path) as f:
                db = json.load(f)
            other = json.loads(json.dumps(db["devices"][0]))
            other["device"]["name"] = "another CPU"
            db["devices"].append(other)
            with open(path, "w") as f:
                json.dump(db, f)
            run("tune", "--op", "linear", "--linear", "64x256", "--scheme", "nvfp4-w4a4", "--tokens", "4",
                "--iters", "1", "--warmup-ms", "0", "--passes", "1", "--output", path, "--replace", check=0)
            with open(path) as f:
                devices = json.load(f)["devices"]
            self.assertEqual(sorted(d["device"]["name"] for d in devices), sorted([device["name"], "another CPU"]))
            for d in devices:
                self.assertEqual(len(d["entries"]), 1 if d["device"]["name"] == device["name"] else 2, d["device"])

    def test_tune_times_the_entry_the_databases_gave_beside_its_search(self):
        # The databases loaded before tuning (here FP4CL_TUNING_FILE) give each bucket an entry:
        # bucket 1 serves 1 and 3 tokens (the nearest bucket). Each is timed beside the search, its
        # origin named; without a database no such entry is named.
        tune = ["tune", "--op", "linear", "--linear", "64x256", "--scheme", "nvfp4-w4a4", "--iters", "1",
                "--warmup-ms", "0", "--passes", "1", "--max-candidates", "1"]
        with tempfile.TemporaryDirectory() as d:
            before, after = os.path.join(d, "before.json"), os.path.join(d, "after.json")
            run(*tune, "--tokens", "1", "--output", before, check=0)
            _, _, err = run(*tune, "--tokens", "1,3", "--output", after, env={"FP4CL_TUNING_FILE": before}, check=0)
            for t in (1, 3):
                line = [l for l in err.splitlines() if l.startswith(f"linear 64x256 nvfp4-w4a4 T={t}:")]
                self.assertEqual(len(line), 1, err)
                self.assertRegex(line[0], r"; database entry \(bucket 1 of " + re.escape(before) +
                                 r": \S+ [^)]*\) [0-9.]+ us; ")
            _, _, err = run(*tune, "--tokens", "1", "--output", after, env={"FP4CL_TUNING_FILE": "none"}, check=0)
            self.assertNotIn("database entry", err)

    def test_tune_mma_merges_into_a_database_with_linear_entries(self):
        # The tensor-core strategy forced (emulated on PoCL): one candidate per bucket, one timed call.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuning.json")
            run("tune", "--op", "linear", "--linear", "64x256", "--scheme", "nvfp4-w4a4", "--tokens", "1", "--iters",
                "1", "--warmup-ms", "0", "--passes", "1", "--max-candidates", "1", "--output", path, check=0)
            _, out, err = run("tune", "--op", "moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk",
                              "2", "--scheme", "nvfp4-w4a16", "--kernel", "mma", "--tokens", "1", "--iters", "1",
                              "--warmup-ms", "0", "--passes", "1", "--max-candidates", "1", "--output", path, check=0)
            self.assertIn("tuning mma", err)
            with open(path) as f:
                entries = json.load(f)["devices"][0]["entries"]
            self.assertEqual(sorted(e["op"] for e in entries), ["linear", "moe"])
            moe = [e for e in entries if e["op"] == "moe"][0]
            self.assertEqual(moe["kernel"], "mma")
            self.assertEqual(moe["shape"], {"hidden": 128, "inter": 64, "experts": 4, "topk": 2})
            # A bucket of few pairs: its FC2's chunks loaded ahead too, written explicitly (the one
            # candidate timed, the start: as many as FC1's).
            self.assertEqual(sorted(moe["params"]), ["fc2_unroll", "few_split_k", "group", "local_h", "local_i",
                                                     "split_k", "stage", "tile_m", "unroll", "vec", "warp_tiles"])
            self.assertEqual(moe["params"]["fc2_unroll"], moe["params"]["unroll"])
            # The MoE benchmark loads it without a warning.
            _, out, err = run("moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk", "2", "--kernel",
                              "mma", "--tokens", "1", *FAST, env={"FP4CL_TUNING_FILE": path}, check=0)
            self.assertNotIn("not valid", err)
            self.assertIn("ok:", out)

    def test_tune_mma_searches_the_routed_fc1_at_routed_buckets(self):
        # 2 tokens of top-2 over 4 experts: a routed chunk (FC1 and FC2 find their tiles), whose
        # FC1's row tiles and blocks of rows a work-group and whose token FC2's row tiles a warp are
        # searched and written (0: automatic).
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuning.json")
            run("tune", "--op", "moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk", "2",
                "--scheme", "nvfp4-w4a16", "--kernel", "mma", "--tokens", "2", "--iters", "1", "--warmup-ms", "0",
                "--passes", "1", "--max-candidates", "1", "--output", path, check=0)
            with open(path) as f:
                moe = json.load(f)["devices"][0]["entries"][0]
            self.assertEqual(moe["tokens"], 2)
            self.assertEqual(moe["params"]["routed_row_tiles"], 0)
            self.assertEqual(moe["params"]["routed_row_loop"], 0)
            self.assertEqual(moe["params"]["token_fc2_warp_tiles"], 0)
            _, out, err = run("moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk", "2", "--kernel",
                              "mma", "--tokens", "2", *FAST, env={"FP4CL_TUNING_FILE": path}, check=0)
            self.assertNotIn("not valid", err)
            self.assertIn("ok:", out)

    def test_tune_moe_times_the_two_best_strategies_again(self):
        # Each strategy's winner comes from its own search; the two fastest are then timed again side
        # by side, and the better of each one's timings decides the entry.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuning.json")
            _, out, err = run("tune", "--op", "moe", "--hidden", "128", "--inter", "64", "--experts", "4", "--topk",
                              "2", "--scheme", "nvfp4-w4a16", "--kernel", "grouped,decode", "--tokens", "1", "--iters",
                              "1", "--passes", "1", "--max-candidates", "1", "--output", path, check=0)
            m = re.search(r"  (\w+) ([\d.]+) us against (\w+) ([\d.]+) us, timed again side by side", err)
            self.assertIsNotNone(m, err)
            self.assertEqual({m.group(1), m.group(3)}, {"grouped", "decode"})
            self.assertLessEqual(float(m.group(2)), float(m.group(4)))
            with open(path) as f:
                moe = json.load(f)["devices"][0]["entries"][0]
            self.assertEqual(moe["kernel"], m.group(1))
            self.assertAlmostEqual(moe["measured"]["us"], float(m.group(2)), delta=0.06)

    def test_corrupt_output_file_is_not_overwritten(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tuning.json")
            with open(path, "w") as f:
                f.write("{ broken")
            code, _, err = run("tune", "--op", "linear", "--linear", "64x256", "--tokens", "1", "--iters", "1",
                               "--output", path)
            self.assertNotEqual(code, 0)
            self.assertIn(path, err)
            with open(path) as f:
                self.assertEqual(f.read(), "{ broken")


CACHE_ENTRIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu", "cache_entries.py")


class ProgramCacheEntries(unittest.TestCase):
    """bench/gpu/cache_entries.py on the cache a tiny run writes: every program's key and binary,
    its build options listed; --match keeps some; a truncated entry is named, exit status 1."""

    def unpack(self, cache, out, *args):
        p = subprocess.run([sys.executable, CACHE_ENTRIES, cache, out, *args], capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_unpacks_what_a_run_built(self):
        with tempfile.TemporaryDirectory() as d:
            cache = os.path.join(d, "cache")
            run(*TINY_LINEAR, "--no-check", env={"FP4CL_CACHE_DIR": cache}, check=0)
            entries = sorted(n for n in os.listdir(cache) if n.endswith(".clbin"))
            self.assertGreater(len(entries), 0)
            code, out, err = self.unpack(cache, os.path.join(d, "all"))
            self.assertEqual(code, 0, err)
            lines = out.strip().split("\n")
            self.assertEqual(len(lines), len(entries), out)
            self.assertTrue(any("-D" in line for line in lines), out)  # build options listed
            for i, name in enumerate(entries):
                with open(os.path.join(d, "all", f"e{i:03d}.key")) as f:
                    key = f.read()
                self.assertTrue(key.startswith("fp4cl program cache"), key)
                self.assertIn("\noptions ", key)
                with open(os.path.join(cache, name), "rb") as f:
                    data = f.read()
                with open(os.path.join(d, "all", f"e{i:03d}.bin"), "rb") as f:
                    binary = f.read()
                self.assertGreater(len(binary), 0)
                self.assertIn(binary, data)
            # --match: only the entries whose key holds the text
            option = re.search(r"-D\w+", lines[-1]).group(0)
            code, out, err = self.unpack(cache, os.path.join(d, "some"), f"--match={option}")
            self.assertEqual(code, 0, err)
            kept = out.strip().split("\n")
            self.assertGreater(len(kept), 0)
            self.assertTrue(all(option in line for line in kept), out)
            self.assertEqual(len(kept), sum(option in line for line in lines), out)
            # a truncated entry is named and fails the run; the others are still written
            with open(os.path.join(cache, entries[0]), "r+b") as f:
                f.truncate(40)
            code, out, err = self.unpack(cache, os.path.join(d, "again"))
            self.assertEqual(code, 1)
            self.assertIn(entries[0], err)
            self.assertIn("truncated", err)
            self.assertEqual(len(out.strip().split("\n")), len(entries) - 1, out)


SASS_LOOPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu", "sass_loops.py")

# A cuobjdump -sass listing in miniature: a forward branch, a loop of 8 instructions (0x40..0xb0, its
# closing branch predicated) holding 2 HMMA, and a loop of 2 without HMMA after it.
SASS = """
        Function : moe_mma_fc1
        /*0000*/                   MOV R1, c[0x0][0x28] ;               /* 0x00000a0000017a02 */
                                                                          /* 0x000fe40000000f00 */
        /*0010*/               @P0 BRA 0x100 ;                           /* 0x00000000000c0947 */
        /*0020*/                   S2R R0, SR_TID.X ;                    /* 0x0000000000007919 */
        /*0030*/                   NOP ;                                 /* 0x0000000000007918 */
        /*0040*/                   LDG.E.128 R4, desc[UR4][R2.64] ;     /* 0x0000000402047981 */
        /*0050*/                   LOP3.LUT R8, R4, 0x81c081c0, RZ, 0xc0, !PT ;
        /*0060*/                   IMAD.SHL.U32 R9, R4, 0x8, RZ ;        /* 0x0000000804097824 */
        /*0070*/                   SHF.R.U32.HI R10, RZ, 0x3, R4 ;       /* 0x00000003ff0a7819 */
        /*0080*/                   HMUL2.BF16_V2 R8, R8, R12 ;           /* 0x0000000c08087232 */
        /*0090*/                   HMMA.16816.F32.BF16 R16, R8, R14, R16 ;
        /*00a0*/                   HMMA.16816.F32.BF16 R20, R8, R14, R20 ;
        /*00b0*/              @!P1 BRA 0x40 ;                            /* 0xfffffff000009947 */
        /*00c0*/                   IADD3 R2, R2, 0x1, RZ ;
        /*00d0*/                   BRA.U 0xc0 ;
        /*0100*/                   EXIT ;
"""


class SassLoops(unittest.TestCase):
    """bench/gpu/sass_loops.py on a miniature listing: each backward branch's loop with its
    instruction and HMMA counts and its opcodes by pipe; --min, --hottest; a file without SASS is
    named, exit status 1."""

    def loops(self, text, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "e000.sass")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run([sys.executable, SASS_LOOPS, path, *args], capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr.replace(path, "FILE")

    def test_loops_and_their_pipes(self):
        code, out, err = self.loops(SASS)
        self.assertEqual(code, 0, err)
        lines = out.strip().split("\n")
        self.assertEqual(len(lines), 2, out)
        self.assertTrue(lines[0].startswith("loop 0x40-0xb0: 8 instructions, 2 HMMA, 4.0 a HMMA; "), lines[0])
        self.assertIn("alu 2 (25 %: LOP3 1 SHF 1)", lines[0])
        self.assertIn("fma (IMAD, FP32) 1 (12 %: IMAD 1)", lines[0])
        self.assertIn("fp16x2 (both FMA pipes) 1 (12 %: HMUL2 1)", lines[0])
        self.assertIn("tensor 2 (25 %: HMMA 2)", lines[0])
        self.assertIn("memory 1 (12 %: LDG 1)", lines[0])
        self.assertIn("other 1 (12 %: BRA 1)", lines[0])
        self.assertTrue(lines[1].startswith("loop 0xc0-0xd0: 2 instructions, 0 HMMA; alu 1"), lines[1])
        code, out, _ = self.loops(SASS, "--min", "1")
        self.assertEqual(out.count("loop "), 1, out)
        code, out, _ = self.loops(SASS, "--hottest")
        self.assertEqual(out.strip(), "loop 0x40-0xb0: 8 instructions, 2 HMMA, 4.0 a HMMA, alu 25 %")

    def test_a_file_without_sass_is_named(self):
        code, out, err = self.loops("Fatbin ptx code:\n")
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertIn("FILE: no SASS instructions", err)


BUILD_REGISTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu",
                               "build_registers.py")

# A debug log as NVIDIA's driver 580 writes it under -cl-nv-verbose (the H200's token FC2 of 2 row
# tiles a warp loading 4 chunks ahead: 68 registers), a program of two kernels, a spilling one, and
# lines of other programs between them.
BUILD_LOG = """fp4cl debug: program moe_route.cl with "-cl-nv-verbose"
fp4cl debug: build log of moe_route.cl ("-cl-nv-verbose"):
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'moe_route_logits' for 'sm_90a'
ptxas info    : Function properties for moe_route_logits
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Function properties for moe_route_topk
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers
fp4cl debug: built moe_route.cl with "-cl-nv-verbose" from source in 0.10 s
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC2=1 -DMMA_KSPLIT=1 -DMMA_MT=2 -DMMA_RT=1 -DMMA_SUM=1 \
-DMMA_TOKEN_SUM=1 -DMMA_TOPK=8 -DMMA_UNROLL=4 -cl-fp32-correctly-rounded-divide-sqrt -cl-nv-verbose"):
(): Warning: Function moe_mma_fc2 is a kernel, so overriding noinline attribute.

ptxas info    : Compiling entry function 'moe_mma_fc2' for 'sm_90a'
ptxas info    : Function properties for moe_mma_fc2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 68 registers, used 1 barriers, 8208 bytes smem
ptxas info    : Compile time = 69.670 ms
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC1=1 -DMMA_KSPLIT=2 -DMMA_RT=2 \
-DMMA_UNROLL=8 -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc1
ptxas         .     1040 bytes stack frame, 1308 bytes spill stores, 1348 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 21824 bytes smem
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC1=1 -DMMA_KSPLIT=1 -DMMA_RT=1 \
-DMMA_UNROLL=1 -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 77000 bytes smem
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC2=1 -DMMA_KSPLIT=2 -DMMA_RT=1 \
-DMMA_UNROLL=2 -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 57 registers, used 1 barriers, 1340 bytes smem
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC1=1 -DMMA_KSPLIT=4 -DMMA_RT=4 -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers, 1024 bytes smem
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC1=1 -DMMA_KSPLIT=1 -DMMA_RT=1 \
-DMMA_NT=2 -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers
fp4cl debug: build log of moe_mma.cl ("-DFP4_MMA_PTX=1 -DMMA_FC2=1 -DMMA_KSPLIT=1 -DMMA_MT=2 -DMMA_RT=1 -DMMA_SUM=1 \
-DMMA_TOKEN_SUM=1 -DMMA_TOPK=8 -DMMA_UNROLL=4 -cl-fp32-correctly-rounded-divide-sqrt -cl-nv-verbose"):
ptxas info    : Function properties for moe_mma_fc2
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 68 registers, used 1 barriers, 8208 bytes smem
"""  # a backslash at a line end joins the lines: one log line


class BuildRegisters(unittest.TestCase):
    """bench/gpu/build_registers.py on a miniature debug log: a line per kernel (repeats dropped)
    with its registers, local memory and spills; moe_mma.cl's work-group from its options and the
    work-groups a compute unit holds, with what bounds them; --match; a log without a ptxas
    report: exit status 1, the flags to build with named."""

    def run_on(self, text, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.log")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run([sys.executable, BUILD_REGISTERS, path, *args], capture_output=True, text=True,
                               timeout=60)
            return p.returncode, p.stdout, p.stderr

    def test_each_kernel_and_what_a_compute_unit_holds(self):
        code, out, err = self.run_on(BUILD_LOG)
        self.assertEqual(code, 0, err)
        lines = out.strip().split("\n")
        self.assertEqual(len(lines), 8, out)
        self.assertEqual(lines[0], "moe_route_logits  32 registers, 0 B local, 0 B spill stores | - | moe_route.cl ")
        self.assertTrue(lines[1].startswith("moe_route_topk  24 registers, 0 B local, 0 B spill stores | - |"),
                        lines[1])
        # 68 registers: 72 a work-item in units of 256 a warp, 28 warps of 65536 registers, 3 work-groups of 8
        self.assertTrue(lines[2].startswith("moe_mma_fc2  68 registers, 8208 B local, 0 B spill stores | 256 "
                                            "work-items: 3 a compute unit (registers) | moe_mma.cl -DFP4_MMA_PTX=1 "),
                        lines[2])
        self.assertNotIn("-cl-", lines[2])
        self.assertIn("-DMMA_MT=2", lines[2])
        self.assertTrue(lines[3].startswith("moe_mma_fc1  255 registers, 21824 B local, 1308 B spill stores | 128 "
                                            "work-items: 2 a compute unit (registers) |"), lines[3])
        # 77000 bytes of local memory and 1024 reserved a work-group: 2 of 233472 (3 without the reserve)
        self.assertTrue(lines[4].startswith("moe_mma_fc1  32 registers, 77000 B local, 0 B spill stores | 32 "
                                            "work-items: 2 a compute unit (local memory) |"), lines[4])
        # 57 registers take 64 (2048 a warp): 32 warps, 16 work-groups of 2 (17 at 57)
        self.assertTrue(lines[5].startswith("moe_mma_fc2  57 registers, 1340 B local, 0 B spill stores | 64 "
                                            "work-items: 16 a compute unit (registers) |"), lines[5])
        # 16 warps a work-group: 4 of 64 (their registers would allow 8)
        self.assertTrue(lines[6].startswith("moe_mma_fc1  16 registers, 1024 B local, 0 B spill stores | 512 "
                                            "work-items: 4 a compute unit (warps) |"), lines[6])
        # a warp, no local memory: the cap of 32 work-groups
        self.assertTrue(lines[7].startswith("moe_mma_fc1  16 registers, 0 B local, 0 B spill stores | 32 "
                                            "work-items: 32 a compute unit (work-groups) |"), lines[7])
        code, out, _ = self.run_on(BUILD_LOG, "--registers", "32768")
        self.assertIn("256 work-items: 1 a compute unit (registers)", out)
        code, out, _ = self.run_on(BUILD_LOG, "--match", "MMA_TOKEN_SUM")
        self.assertEqual(out.count("\n"), 1, out)
        self.assertTrue(out.startswith("moe_mma_fc2  68 registers"), out)

    def test_a_log_without_a_ptxas_report(self):
        code, out, err = self.run_on("fp4cl debug: program moe_route.cl with \"\"\n")
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertIn("no ptxas report in the log (build with FP4CL_BUILD_FLAGS=-cl-nv-verbose", err)


AB_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu", "ab_table.py")


class AbTable(unittest.TestCase):
    """bench/gpu/ab_table.py on the CSV of tiny runs: rows gathered per tree and round (one header),
    the table of each row's medians side by side with their ratio; a failed check and a file that
    is not bench CSV are named, exit status 1."""

    def tool(self, *args):
        p = subprocess.run([sys.executable, AB_TABLE, *args], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_rows_side_by_side(self):
        with tempfile.TemporaryDirectory() as d:
            part, ab = os.path.join(d, "part.csv"), os.path.join(d, "ab.csv")
            for r, tree in [(1, "new"), (1, "base"), (2, "base"), (2, "new")]:
                _, out, _ = run(*TINY_MOE, "--tokens", "1,2", "--csv", check=0)
                with open(part, "w") as f:
                    f.write(out)
                code, printed, err = self.tool("append", part, ab, tree, str(r))
                self.assertEqual(code, 0, err)
                printed = printed.strip().split("\n")  # one line a row as it is appended
                self.assertEqual(len(printed), 2, printed)
                self.assertTrue(printed[0].startswith(f"{tree} {r} moe H=64 I=64 E=4 k=2 nvfp4-w4a16 T 1 "), printed[0])
                self.assertIn(" ok: ", printed[0])
            with open(ab) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(len(rows), 8)
            self.assertEqual([(x["tree"], x["round"], x["tokens"]) for x in rows[:2]], [("new", "1", "1"), ("new", "1", "2")])
            code, out, err = self.tool("table", ab)
            self.assertEqual(code, 0, err)
            lines = out.strip().split("\n")
            self.assertEqual(lines[0], "| op | shape | scheme | T | kernel | new µs | base µs | new / base |")
            self.assertEqual(len(lines), 4, out)  # header, rule, T = 1, T = 2
            for line, t in zip(lines[2:], ("1", "2")):
                cells = [c.strip() for c in line.strip("|").split("|")]
                self.assertEqual(cells[0], "moe")
                self.assertEqual(cells[3], t)
                new = [float(v) for v in cells[5].split(", ")]
                base = [float(v) for v in cells[6].split(", ")]
                self.assertEqual((len(new), len(base)), (2, 2), line)
                ratio = (sum(new) / 2) / (sum(base) / 2)
                self.assertAlmostEqual(float(cells[7]), ratio, delta=0.03 * ratio, msg=line)  # the cells are rounded to 0.1 µs
            # a row whose check failed: the table still printed, the row named, exit status 1
            with open(ab) as f:
                text = f.read()
            with open(ab, "w") as f:
                f.write(text.replace(",ok: ", ",FAILED: ", 1))
            code, out, err = self.tool("table", ab)
            self.assertEqual(code, 1)
            self.assertIn("| moe |", out)
            self.assertIn("ab.csv:2: new round 1 moe", err)
            self.assertIn("check 'FAILED: ", err)

    def test_other_files_are_named(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "notes.csv")
            with open(path, "w") as f:
                f.write("a,b\n1,2\n")
            code, _, err = self.tool("append", path, os.path.join(d, "ab.csv"), "new", "1")
            self.assertEqual(code, 1)
            self.assertIn("notes.csv: not fp4cl-bench --csv output", err)
            code, _, err = self.tool("table", path)
            self.assertEqual(code, 1)
            self.assertIn("notes.csv: no rows of ab_table.py append", err)
            code, _, err = self.tool("table")
            self.assertEqual(code, 1)
            self.assertIn("usage", err)



AB_TUNING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "ab-tuning.sh")


class AbTuning(unittest.TestCase):
    """bench/ab-tuning.sh on a tiny linear shape: the final table on stdout (both sides' medians per
    round and their ratio), and on stderr each call's rows as measured and the table after each
    round but the last, which a run stopped by a time limit leaves behind; bad arguments named."""

    def script(self, *args, env=None):
        full_env = dict(os.environ, FP4CL_AB_ITERS="1")
        full_env.update(env or {})
        build = os.path.dirname(os.path.dirname(os.path.abspath(BENCH)))
        p = subprocess.run(["bash", AB_TUNING, build, *args], capture_output=True, text=True, env=full_env,
                           timeout=240)
        return p.returncode, p.stdout, p.stderr

    def test_each_round_is_reported_as_it_ends(self):
        code, out, err = self.script("2", "64x256", "1", "nvfp4-w4a16", env={"FP4CL_AB_BASELINE": "shipped"})
        self.assertEqual(code, 0, err)
        rows = [line for line in out.splitlines() if line.startswith("| 64x256 ")]
        self.assertEqual(len(rows), 1, out)
        self.assertIn("baseline (shipped)", out)
        # | shape | scheme | tokens | tuned per round | baseline per round | ratio |
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        self.assertEqual(cells[:3], ["64x256", "nvfp4-w4a16", "1"])
        for side in cells[3:5]:
            self.assertRegex(side, r"^\S+ [0-9.]+ / [0-9.]+$")
        self.assertRegex(cells[5], r"^[0-9]+\.[0-9]{2}$")
        for r, side in [(1, "tuned"), (1, "defaults"), (2, "tuned"), (2, "defaults")]:
            self.assertIn(f"round {r} of 2, {side}, 64x256:", err)
        self.assertIn("after round 1 of 2:", err)
        self.assertNotIn("after round 2 of 2", err)
        partial = err.split("after round 1 of 2:")[1]
        partial_row = [line for line in partial.splitlines() if line.startswith("| 64x256 ")][0]
        cells = [c.strip() for c in partial_row.strip("|").split("|")]
        for side in cells[3:5]:
            self.assertRegex(side, r"^\S+ [0-9.]+$")  # one round each

    def test_bad_arguments_are_named(self):
        code, _, err = self.script("0")
        self.assertEqual(code, 2)
        self.assertIn("ROUNDS must be a positive integer, got '0'", err)
        code, _, err = self.script("1", "64by256", "1", "nvfp4-w4a16")
        self.assertEqual(code, 2)
        self.assertIn("shape '64by256' is neither NxK nor moe:PRESET", err)
        code, _, err = self.script("1", "64x256", "1", "nvfp4-w4a16", env={"FP4CL_AB_BASELINE": "/nonexistent"})
        self.assertEqual(code, 2)
        self.assertIn("neither none, shipped nor a file", err)

if __name__ == "__main__":
    BENCH = sys.argv.pop(1)
    unittest.main(verbosity=2)
