#!/usr/bin/env bash
# Validates the deployment files (docs/deployment.md) as far as this machine can
# without Docker or Kubernetes:
#   - every YAML file under deploy/ parses (multi-document files included);
#   - Kubernetes manifests hang together: kustomization lists every manifest, probes,
#     scrape annotations, ports, ConfigMap mount, Service/ServiceMonitor selectors;
#   - the compose file: shard services, mounts that exist, config and scrape target;
#   - the splitpoint configs (the one embedded in the ConfigMap, the compose one) pass
#     `splitpoint --check`;
#   - promtool accepts both Prometheus configs and the alert rules, and the alerts fire
#     (and stay quiet) on synthetic series (`promtool test rules`);
#   - the Grafana dashboard parses and every panel has a PromQL expression; every metric
#     the dashboard and the alerts use is a splitpoint metric;
#   - the Dockerfile builds with deploy/install-deps and deploy/build, and its runtime
#     apt-get line covers every library `ldd $SP_BIN` needs (package via dpkg -S);
#     deploy/image (which builds and runs the image with podman, by hand) parses;
#   - live: the proxy started with the compose config (shards pointed at PG0/PG1, plus
#     `catalog: s0` for the moves metrics; the schema is dropped afterwards) answers the HEALTHCHECK command and the probe paths, exposes every metric the
#     dashboard and alerts use, and Prometheus started with deploy/prometheus/
#     prometheus.yml scrapes it and evaluates every dashboard and alert expression.
# test-timeout: 300
set -euo pipefail

: "${SP_ROOT:?}" "${SP_BIN:?}" "${PG0_PORT:?}" "${PG1_PORT:?}"
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
cd "$SP_ROOT"

PY=/usr/bin/python3
work=${TEST_WORKDIR:-$(test_dir deploy_files)}
mkdir -p "$work"
export SP_ROOT SP_BIN WORK=$work

failures=0
pass() { echo "ok:   $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# check DESCRIPTION CMD...: runs CMD, output shown on failure.
check() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then
    pass "$what"
  else
    fail "$what"
    # shellcheck disable=SC2001  # indent every line
    sed 's/^/      /' <<<"$out"
  fi
}

[[ -x $SP_BIN ]] || { echo "SP_BIN=$SP_BIN is not executable" >&2; exit 1; }
"$PY" -c 'import yaml' 2>/dev/null || { echo "python3-yaml missing (deploy/install-deps)" >&2; exit 1; }
if ! command -v promtool >/dev/null; then
  echo "promtool missing: running deploy/install-deps (package prometheus)"
  ./deploy/install-deps
fi

# ---------------------------------------------------------------- YAML everywhere
check "every YAML file under deploy/ parses" "$PY" - <<'PY'
import pathlib, sys, yaml
files = sorted(p for p in pathlib.Path("deploy").rglob("*") if p.suffix in (".yaml", ".yml"))
if len(files) < 8:
    sys.exit(f"only {len(files)} YAML files under deploy/: {[str(f) for f in files]}")
bad = 0
for f in files:
    try:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        if not docs:
            raise ValueError("no document")
        print(f"{f}: {len(docs)} document(s)")
    except Exception as e:
        print(f"{f}: {e}")
        bad += 1
sys.exit(bad)
PY

# ---------------------------------------------------------------- Kubernetes
check "kubernetes manifests are consistent; ConfigMap config extracted" "$PY" - <<'PY'
import os, pathlib, re, sys, yaml
from urllib.parse import urlsplit
K = pathlib.Path("deploy/kubernetes")
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)

kust = yaml.safe_load((K / "kustomization.yaml").read_text())
need(kust.get("kind") == "Kustomization", "kustomization.yaml: kind is not Kustomization")
manifests = sorted(p.name for p in K.glob("*.yaml") if p.name != "kustomization.yaml")
need(sorted(kust.get("resources", [])) == manifests,
     f"kustomization resources {kust.get('resources')} != manifests {manifests}")

objs = []
for name in manifests:
    for d in yaml.safe_load_all((K / name).read_text()):
        if d is None:
            continue
        for key in ("apiVersion", "kind"):
            need(key in d, f"{name}: a document without {key}")
        need(d.get("metadata", {}).get("name"), f"{name}: {d.get('kind')} without metadata.name")
        objs.append(d)
def one(kind):
    found = [o for o in objs if o.get("kind") == kind]
    need(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0] if found else {}

cm, dep, svc, sm = one("ConfigMap"), one("Deployment"), one("Service"), one("ServiceMonitor")
need(sm.get("apiVersion") == "monitoring.coreos.com/v1", "ServiceMonitor apiVersion")

cfg_text = cm.get("data", {}).get("splitpoint.yaml")
need(cfg_text, "ConfigMap has no data key splitpoint.yaml")
cfg = yaml.safe_load(cfg_text or "{}")
out = pathlib.Path(os.environ["WORK"]) / "k8s-splitpoint.yaml"
out.write_text(cfg_text or "")
port_of = lambda ep: int(str(ep).rsplit(":", 1)[1])
listen_port = port_of(cfg.get("listen", "127.0.0.1:6432"))
metrics_port = port_of(cfg.get("metrics_listen", "127.0.0.1:9930"))
need(not str(cfg.get("metrics_listen", "127.0.0.1")).startswith("127."),
     "ConfigMap: metrics_listen must not be loopback (kubelet probes and Prometheus use the Pod IP)")
need([s.get("host") for s in cfg.get("shards", [])] == ["postgres-0", "postgres-1"],
     "ConfigMap: shards must be postgres-0 and postgres-1")
methods = {d.get("method", "hash") for d in cfg.get("distributions", [])}
need({"hash", "range"} <= methods, f"ConfigMap: needs a hash and a range distribution, has {methods}")
need(cfg.get("reference_tables"), "ConfigMap: no reference table")
need(any(u.get("admin") for u in cfg.get("users", [])), "ConfigMap: no admin user")

tpl = dep.get("spec", {}).get("template", {})
meta, spec = tpl.get("metadata", {}), tpl.get("spec", {})
ann = meta.get("annotations", {})
need(ann.get("prometheus.io/scrape") == "true", "pod annotation prometheus.io/scrape must be \"true\"")
need(ann.get("prometheus.io/port") == str(metrics_port), f"pod annotation prometheus.io/port != {metrics_port}")
need(ann.get("prometheus.io/path") == "/metrics", "pod annotation prometheus.io/path != /metrics")
need(dep["spec"]["selector"]["matchLabels"].items() <= meta.get("labels", {}).items(),
     "Deployment selector does not match the pod template labels")
containers = {c["name"]: c for c in spec.get("containers", [])}
sp = containers.get("splitpoint")
need(sp, "no container named splitpoint")
apps = [c for n, c in containers.items() if n != "splitpoint"]
need(apps, "no application container")
if sp:
    ports = {p.get("name"): p["containerPort"] for p in sp.get("ports", [])}
    def probe(kind, path):
        get = (sp.get(kind) or {}).get("httpGet") or {}
        port = get.get("port")
        port = ports.get(port, port)
        need(get.get("path") == path and port == metrics_port,
             f"{kind}: expected GET {path} on {metrics_port}, got {get.get('path')} on {port}")
    probe("readinessProbe", "/readyz")
    probe("livenessProbe", "/healthz")
    res = sp.get("resources", {})
    need(res.get("requests") and res.get("limits"), "splitpoint container: resources requests and limits")
    sc = {**spec.get("securityContext", {}), **sp.get("securityContext", {})}
    need(sc.get("runAsNonRoot") is True, "splitpoint container: runAsNonRoot")
    need(sc.get("runAsUser", 1) != 0, "splitpoint container runs as uid 0")
    mounts = {m["mountPath"]: m["name"] for m in sp.get("volumeMounts", [])}
    need("/etc/splitpoint" in mounts, "splitpoint container: nothing mounted at /etc/splitpoint")
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    # podman 4.3's `play kube` (deploy/image) crashes on a Secret volume without it.
    for v in vols.values():
        if "secret" in v:
            need("optional" in v["secret"], f"Secret volume {v['name']}: spell out optional: (podman play kube)")
    vol = vols.get(mounts.get("/etc/splitpoint"), {})
    need((vol.get("configMap") or {}).get("name") == cm.get("metadata", {}).get("name"),
         "the /etc/splitpoint volume is not the ConfigMap")
    args = sp.get("args", [])
    if "--config" in args:
        need(args[args.index("--config") + 1] == "/etc/splitpoint/splitpoint.yaml", "--config path")
    # SPEC §11: each password_file: is a key of a Secret mounted at its directory, each
    # password_env: a variable the container takes from a Secret; no plaintext shard
    # password in the ConfigMap. `--check` below reads them: the Secret's values go to
    # $WORK (the paths rewritten) and to k8s-env.
    secrets = {o["metadata"]["name"]: {**(o.get("stringData") or {})} for o in objs if o.get("kind") == "Secret"}
    files, envs = {}, []
    for entry in cfg.get("users", []) + cfg.get("shards", []):
        need(not ("password" in entry and not str(entry["password"]).startswith(("SCRAM-SHA-256$", "md5"))),
             f"ConfigMap: {entry.get('name')} has a plaintext password; use password_file: or password_env:")
        if "password_file" in entry:
            f = pathlib.PurePosixPath(entry["password_file"])
            mount = next((m for m in sp.get("volumeMounts", []) if m["mountPath"] == str(f.parent)), None)
            vol = (vols.get(mount["name"], {}) if mount else {}).get("secret") or {}
            items = {i["path"]: i["key"] for i in vol.get("items", [])} or {k: k for k in secrets.get(vol.get("secretName"), {})}
            key = items.get(f.name)
            value = secrets.get(vol.get("secretName"), {}).get(key)
            need(value is not None, f"password_file {f}: not a key of a Secret mounted at {f.parent}")
            files[str(f)] = value or ""
        if "password_env" in entry:
            var = entry["password_env"]
            ref = next((((e.get("valueFrom") or {}).get("secretKeyRef") or {}) for e in sp.get("env", []) if e["name"] == var), {})
            value = secrets.get(ref.get("name"), {}).get(ref.get("key"))
            need(value is not None, f"password_env {var}: not an env var of the splitpoint container from a Secret")
            envs.append(f"{var}={value or ''}")
    need(files and envs, "ConfigMap: expected an example of both password_file: and password_env:")
    text = cfg_text or ""
    for i, (path, value) in enumerate(sorted(files.items())):
        local = pathlib.Path(os.environ["WORK"]) / f"k8s-secret-{i}"
        local.write_text(value + "\n")  # as a Secret created with --from-file from an editor's file
        text = text.replace(path, str(local))
    out.write_text(text)
    (pathlib.Path(os.environ["WORK"]) / "k8s-env").write_text("\n".join(envs) + "\n")
for app in apps:
    env = {e["name"]: e.get("value") for e in app.get("env", [])}
    url = env.get("DATABASE_URL")
    need(url == "postgresql://app:secret@127.0.0.1:6432/app", f"{app['name']}: DATABASE_URL is {url}")
    if url:
        need(urlsplit(url).port == listen_port, "DATABASE_URL port != the config's listen port")
        need(urlsplit(url).username in {u["name"] for u in cfg.get("users", [])},
             "DATABASE_URL user is not in the config's users")
    app_sc = {**spec.get("securityContext", {}), **app.get("securityContext", {})}
    need(not app_sc.get("runAsNonRoot") or app_sc.get("runAsUser", 1) != 0,
         f"{app['name']}: runAsNonRoot with a root image needs a runAsUser")

pod_labels = meta.get("labels", {})
need(svc.get("spec", {}).get("selector", {}).items() <= pod_labels.items(),
     "metrics Service selector does not select the pod template")
svc_ports = {p.get("name"): p for p in svc.get("spec", {}).get("ports", [])}
sm_spec = sm.get("spec", {})
need(sm_spec.get("selector", {}).get("matchLabels", {}).items() <= svc.get("metadata", {}).get("labels", {}).items(),
     "ServiceMonitor selector does not select the Service")
for ep in sm_spec.get("endpoints", []):
    p = svc_ports.get(ep.get("port"))
    need(p, f"ServiceMonitor endpoint port {ep.get('port')} is not a Service port name")
    if p and sp:
        target = p.get("targetPort")
        target = {q.get("name"): q["containerPort"] for q in sp.get("ports", [])}.get(target, target)
        need(target == metrics_port, f"Service targetPort resolves to {target}, not {metrics_port}")
    need(ep.get("path", "/metrics") == "/metrics", "ServiceMonitor path")
job = svc.get("metadata", {}).get("labels", {}).get(sm_spec.get("jobLabel"), svc.get("metadata", {}).get("name"))
need(job == "splitpoint", f"the ServiceMonitor's job label would be {job!r}; alerts.yml expects \"splitpoint\"")

for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# ---------------------------------------------------------------- compose
check "compose file is consistent" "$PY" - <<'PY'
import pathlib, sys, yaml
D = pathlib.Path("deploy")
c = yaml.safe_load((D / "compose.yaml").read_text())
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)
svcs = c.get("services", {})
shards = [n for n, s in svcs.items() if str(s.get("image", "")).startswith("postgres:15")]
need(len(shards) == 2, f"expected two postgres:15 services, found {shards}")
for n in shards:
    mounts = [v for v in svcs[n].get("volumes", []) if "/docker-entrypoint-initdb.d" in v]
    need(mounts, f"{n}: no init script mounted in /docker-entrypoint-initdb.d")
sp = svcs.get("splitpoint", {})
b = sp.get("build", {})
need((D / b.get("context", "?") / b.get("dockerfile", "Dockerfile")).resolve() == pathlib.Path("Dockerfile").resolve(),
     "splitpoint.build does not point at the repository's Dockerfile")
cfg_mount = [v for v in sp.get("volumes", []) if v.split(":")[1] == "/etc/splitpoint/splitpoint.yaml"]
need(cfg_mount and cfg_mount[0].split(":")[0] == "./compose/splitpoint.yaml",
     "splitpoint: ./compose/splitpoint.yaml is not mounted at /etc/splitpoint/splitpoint.yaml")
prom = [n for n, s in svcs.items() if str(s.get("image", "")).startswith("prom/prometheus")]
need(len(prom) == 1, "expected one prom/prometheus service")
for n, s in svcs.items():
    for v in s.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith("."):
            need((D / src).exists(), f"{n}: mounted {src} does not exist")
cfg = yaml.safe_load((D / "compose/splitpoint.yaml").read_text())
need(sorted(s.get("host") for s in cfg.get("shards", [])) == sorted(shards),
     "compose/splitpoint.yaml shard hosts are not the compose shard services")
metrics_port = cfg.get("metrics_listen", "127.0.0.1:9930").rsplit(":", 1)[1]
need(cfg.get("listen", "").startswith("0.0.0.0:") and cfg.get("metrics_listen", "").startswith("0.0.0.0:"),
     "compose/splitpoint.yaml must listen on 0.0.0.0 to be reachable from outside the container")
pc = yaml.safe_load((D / "compose/prometheus.yml").read_text())
targets = [t for j in pc.get("scrape_configs", []) for s in j.get("static_configs", []) for t in s.get("targets", [])]
need(f"splitpoint:{metrics_port}" in targets, f"compose/prometheus.yml does not scrape splitpoint:{metrics_port}")
need([j.get("job_name") for j in pc.get("scrape_configs", [])] == ["splitpoint"], "compose job name must be splitpoint")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# ---------------------------------------------------------------- splitpoint --check
# shellcheck disable=SC2046  # one VAR=value per line, no spaces
check "splitpoint --check: ConfigMap's embedded config, the Secret's values in place" \
  env $(cat "$work/k8s-env") "$SP_BIN" --check --config "$work/k8s-splitpoint.yaml"
check "splitpoint --check: deploy/compose/splitpoint.yaml" "$SP_BIN" --check --config deploy/compose/splitpoint.yaml
# The check must be able to fail, or the two lines above prove nothing.
sed 's/^pool_mode: transaction/pool_mode: sometimes/' deploy/compose/splitpoint.yaml >"$work/bad.yaml"
if "$SP_BIN" --check --config "$work/bad.yaml" >/dev/null 2>&1; then
  fail "splitpoint --check accepted an invalid pool_mode"
else
  pass "splitpoint --check rejects an invalid copy"
fi

# ---------------------------------------------------------------- promtool
check "promtool check config deploy/prometheus/prometheus.yml" promtool check config deploy/prometheus/prometheus.yml
check "promtool check config deploy/compose/prometheus.yml" promtool check config deploy/compose/prometheus.yml
check "promtool check rules deploy/prometheus/alerts.yml" promtool check rules deploy/prometheus/alerts.yml

# promtool test rules compares annotations verbatim; test a copy without them (their
# templates were checked above) so the test is about expressions, `for` and labels.
"$PY" - <<'PY'
import os, yaml
g = yaml.safe_load(open("deploy/prometheus/alerts.yml"))
for group in g["groups"]:
    for r in group["rules"]:
        r.pop("annotations", None)
open(os.path.join(os.environ["WORK"], "alerts-bare.yml"), "w").write(yaml.safe_dump(g))
PY
cat >"$work/alerts-test.yml" <<'EOF'
rule_files: [alerts-bare.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'up{job="splitpoint", instance="p1:9930"}'
        values: '0x10'
      - series: 'up{job="splitpoint", instance="p2:9930"}'
        values: '1x10'
      - series: 'up{job="other", instance="x:1"}'
        values: '0x10'
      # 100 multi-shard statements a minute; s1 misses 10 of them, s0 one.
      - series: 'splitpoint_queries_total{job="splitpoint", instance="p2:9930", route="multi"}'
        values: '0+100x40'
      - series: 'splitpoint_queries_total{job="splitpoint", instance="p2:9930", route="single"}'
        values: '0+100000x40'
      - series: 'splitpoint_scatter_missing_total{job="splitpoint", instance="p2:9930", shard="s1", reason="timeout"}'
        values: '0+10x40'
      - series: 'splitpoint_scatter_missing_total{job="splitpoint", instance="p2:9930", shard="s0", reason="timeout"}'
        values: '0+1x40'
      # s1: most waits between 50ms and 250ms; s0: all under 5ms.
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s1", le="0.005"}'
        values: '0+10x40'
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s1", le="0.25"}'
        values: '0+100x40'
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s1", le="+Inf"}'
        values: '0+100x40'
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s0", le="0.005"}'
        values: '0+100x40'
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s0", le="0.25"}'
        values: '0+100x40'
      - series: 'splitpoint_pool_wait_seconds_bucket{job="splitpoint", instance="p2:9930", shard="s0", le="+Inf"}'
        values: '0+100x40'
      # by_user: busiest partition at 2x an even share, with volume; by_day skewed
      # but with too little traffic to judge; by_region even.
      - series: 'splitpoint_partition_skew{job="splitpoint", instance="p2:9930", distribution="by_user"}'
        values: '2x40'
      - series: 'splitpoint_partition_queries_total{job="splitpoint", instance="p2:9930", distribution="by_user", partition="0"}'
        values: '20000x40'
      - series: 'splitpoint_partition_skew{job="splitpoint", instance="p2:9930", distribution="by_day"}'
        values: '3x40'
      - series: 'splitpoint_partition_queries_total{job="splitpoint", instance="p2:9930", distribution="by_day", partition="0"}'
        values: '30x40'
      - series: 'splitpoint_partition_skew{job="splitpoint", instance="p2:9930", distribution="by_region"}'
        values: '1.1x40'
      - series: 'splitpoint_partition_queries_total{job="splitpoint", instance="p2:9930", distribution="by_region", partition="0"}'
        values: '50000x40'
      - series: 'splitpoint_config_reloads_total{job="splitpoint", instance="p2:9930", result="failure"}'
        values: '0 0 0 1x37'
      - series: 'splitpoint_config_reloads_total{job="splitpoint", instance="p2:9930", result="success"}'
        values: '0 1 2 3x37'
    alert_rule_test:
      - eval_time: 1m
        alertname: SplitpointDown
      - eval_time: 5m
        alertname: SplitpointDown
        exp_alerts:
          - exp_labels: { severity: critical, job: splitpoint, instance: "p1:9930" }
      - eval_time: 20m
        alertname: SplitpointScatterMissingHigh
        exp_alerts:
          - exp_labels: { severity: warning, job: splitpoint, instance: "p2:9930", shard: s1, reason: timeout }
      - eval_time: 20m
        alertname: SplitpointPoolWaitHigh
        exp_alerts:
          - exp_labels: { severity: warning, job: splitpoint, instance: "p2:9930", shard: s1 }
      - eval_time: 20m
        alertname: SplitpointPartitionSkew
      - eval_time: 35m
        alertname: SplitpointPartitionSkew
        exp_alerts:
          - exp_labels: { severity: info, job: splitpoint, instance: "p2:9930", distribution: by_user }
      - eval_time: 2m
        alertname: SplitpointConfigReloadFailed
      - eval_time: 5m
        alertname: SplitpointConfigReloadFailed
        exp_alerts:
          - exp_labels: { severity: warning, job: splitpoint, instance: "p2:9930", result: failure }
      - eval_time: 20m
        alertname: SplitpointConfigReloadFailed
      - eval_time: 20m
        alertname: SplitpointAbsent
  - interval: 1m
    input_series:
      - series: 'up{job="other", instance="x:1"}'
        values: '1x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: SplitpointAbsent
      - eval_time: 15m
        alertname: SplitpointAbsent
        exp_alerts:
          - exp_labels: { severity: warning, job: splitpoint }
EOF
check "promtool test rules: alerts fire on synthetic series, and only there" \
  bash -c "cd '$work' && promtool test rules alerts-test.yml"

# ---------------------------------------------------------------- Grafana dashboard
# Metric families splitpoint exposes (SPEC §8 plus the documented additions).
known_metrics="splitpoint_client_connections splitpoint_server_connections splitpoint_queries_total
splitpoint_query_duration_seconds splitpoint_shard_query_duration_seconds splitpoint_scatter_missing_total
splitpoint_partition_queries_total splitpoint_errors_total splitpoint_pool_wait_seconds
splitpoint_config_reloads_total splitpoint_bytes_total splitpoint_pool_waits_total
splitpoint_server_connect_errors_total splitpoint_partition_skew splitpoint_partition_writes_total
splitpoint_replica_lag_seconds splitpoint_host_bans_total splitpoint_failovers_total
splitpoint_topology_epoch splitpoint_proxies splitpoint_moves splitpoint_move_lag_bytes
splitpoint_move_rows_copied_total splitpoint_held_statements_total splitpoint_cutover_hold_seconds
splitpoint_held_statements splitpoint_fence_rejections_total"
export KNOWN_METRICS=$known_metrics
check "dashboard JSON: panels, PromQL, metric names; alerts' metric names" "$PY" - <<'PY'
import json, os, re, sys, yaml
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)
d = json.load(open("deploy/grafana/splitpoint-dashboard.json"))
need(36 <= d.get("schemaVersion", 0) <= 40, f"schemaVersion {d.get('schemaVersion')}")
need(d.get("uid") and d.get("title"), "dashboard uid/title")
panels = []
for p in d.get("panels", []):
    panels.append(p)
    panels.extend(p.get("panels", []))  # collapsed rows
ids = [p.get("id") for p in panels]
need(len(ids) == len(set(ids)), f"duplicate panel ids: {ids}")
exprs = []
for p in panels:
    if p.get("type") == "row":
        continue
    ts = p.get("targets") or []
    need(ts, f"panel {p.get('title')!r} has no targets")
    for t in ts:
        e = (t.get("expr") or "").strip()
        need(e, f"panel {p.get('title')!r} target {t.get('refId')} has no PromQL expr")
        need(re.search(r"\bsplitpoint_\w+", e), f"panel {p.get('title')!r}: expr uses no splitpoint metric: {e}")
        exprs.append(e)
    need("gridPos" in p, f"panel {p.get('title')!r} has no gridPos")
vars_ = {v["name"] for v in d.get("templating", {}).get("list", [])}
for e in exprs:
    for v in re.findall(r"\$(\w+)", e):
        need(v.startswith("__") or v in vars_, f"expr uses undefined variable ${v}: {e}")
all_text = "\n".join(exprs)
required = {
    "queries by route": r"rate\(splitpoint_queries_total",
    "p50 latency by route": r"histogram_quantile\(0\.5,.*splitpoint_query_duration_seconds_bucket",
    "p99 latency by route": r"histogram_quantile\(0\.99,.*splitpoint_query_duration_seconds_bucket",
    "per-shard latency": r"splitpoint_shard_query_duration_seconds_bucket",
    "client connections": r"splitpoint_client_connections",
    "server connections": r"splitpoint_server_connections",
    "pool wait p99": r"histogram_quantile\(0\.99,.*splitpoint_pool_wait_seconds_bucket",
    "scatter missing by reason": r"by \([^)]*reason[^)]*\) \(rate\(splitpoint_scatter_missing_total",
    "errors by sqlstate": r"by \(sqlstate\) \(rate\(splitpoint_errors_total",
    "top partitions": r"topk\(\d+, .*rate\(splitpoint_partition_queries_total",
    "skew": r"splitpoint_partition_skew",
    "config reloads": r"splitpoint_config_reloads_total",
    "bytes in/out": r"by \(direction\) \(rate\(splitpoint_bytes_total",
    "moves by state": r"by \(state\) \(splitpoint_moves\{",
    "cutover hold p99": r"histogram_quantile\(0\.99,.*splitpoint_cutover_hold_seconds_bucket",
    "move lag": r"splitpoint_move_lag_bytes",
    "rows copied rate": r"rate\(splitpoint_move_rows_copied_total",
    "topology epoch": r"splitpoint_topology_epoch",
}
for what, rx in required.items():
    need(re.search(rx, all_text), f"no panel for {what} (/{rx}/)")

known = set(os.environ["KNOWN_METRICS"].split())
def base(m):
    return re.sub(r"_(bucket|count|sum)$", "", m) if re.search(r"_seconds_(bucket|count|sum)$", m) else m
alerts = yaml.safe_load(open("deploy/prometheus/alerts.yml"))
alert_exprs = [r["expr"] for g in alerts["groups"] for r in g["rules"]]
used = set()
for e in exprs + alert_exprs:
    used |= {base(m) for m in re.findall(r"\bsplitpoint_\w+", e)}
need(used <= known, f"unknown metric names: {sorted(used - known)}")
open(os.path.join(os.environ["WORK"], "exprs.txt"), "w").write(
    "\n".join(e.replace("\n", " ") for e in exprs + alert_exprs) + "\n")
open(os.path.join(os.environ["WORK"], "used-metrics.txt"), "w").write("\n".join(sorted(used)) + "\n")
print(f"{len(panels)} panels, {len(exprs)} dashboard expressions, {len(alert_exprs)} alert expressions")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# ---------------------------------------------------------------- Dockerfile
# deploy/image builds and runs the image for real (by hand: root, podman, a compile).
check "deploy/image is executable and parses (bash -n)" bash -c '[[ -x deploy/image ]] && bash -n deploy/image'
check "Dockerfile: stages, build scripts, user, ports, healthcheck, entrypoint; .dockerignore" "$PY" - <<'PY'
import fnmatch, json, re, shlex, sys
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)
# Instructions with continuation lines joined; comment lines inside them dropped, as
# Docker does.
instrs, cur = [], ""
for line in open("Dockerfile").read().splitlines():
    if line.lstrip().startswith("#"):
        continue
    if line.rstrip().endswith("\\"):
        cur += line.rstrip()[:-1] + " "
        continue
    cur += line
    if cur.strip():
        instrs.append(cur.strip())
    cur = ""
stages = []
for i in instrs:
    word, _, rest = i.partition(" ")
    if word.upper() == "FROM":
        stages.append({"from": rest.strip(), "instrs": []})
    elif stages:
        stages[-1]["instrs"].append((word.upper(), rest.strip()))
need(len(stages) >= 2, "Dockerfile is not multi-stage")
build, final = stages[0], stages[-1]
need(re.fullmatch(r"debian:12(\S*)? +AS +\w+", build["from"], re.I) or build["from"].startswith("debian:bookworm"),
     f"build stage is {build['from']!r}, not debian:12")
need(final["from"].split()[0] in ("debian:12-slim", "debian:bookworm-slim"), f"runtime stage is {final['from']!r}")
runs = " && ".join(r for k, r in build["instrs"] if k == "RUN")
need(re.search(r"(^|[\s&;])\./deploy/install-deps --for build --clean\b", runs),
     "build stage does not run ./deploy/install-deps --for build --clean")
need(re.search(r"\bBUILD_DIR=/build (BUILD_TYPE=\w+ )?BUILD_TARGET=splitpoint \./deploy/build\b", runs),
     "build stage does not run BUILD_DIR=/build [BUILD_TYPE=...] BUILD_TARGET=splitpoint ./deploy/build")
need(runs.find("install-deps") < runs.find("deploy/build"), "install-deps must run before deploy/build")
fin = final["instrs"]
def values(kind):
    return [r for k, r in fin if k == kind]
users = values("USER")
need(users and users[-1].split(":")[0] not in ("root", "0"), f"runtime USER is {users}")
envs = " ".join(values("ENV"))
need(re.search(r"\bSPLITPOINT_CONFIG=/etc/splitpoint/splitpoint\.yaml\b", envs), "ENV SPLITPOINT_CONFIG")
exposed = {p.split("/")[0] for e in values("EXPOSE") for p in e.split()}
need({"6432", "9930"} <= exposed, f"EXPOSE {exposed}")
hc = " ".join(values("HEALTHCHECK"))
need("curl" in hc and "http://127.0.0.1:9930/healthz" in hc, f"HEALTHCHECK {hc!r}")
ep = values("ENTRYPOINT")
need(ep and json.loads(ep[-1]) == ["/usr/local/bin/splitpoint"], f"ENTRYPOINT {ep}")
need(any(k == "COPY" and "--from=" in r and r.split()[-1] == "/usr/local/bin/splitpoint" for k, r in fin),
     "runtime stage does not COPY the binary to /usr/local/bin/splitpoint")
# The user's numeric id, so Kubernetes' runAsNonRoot can verify it.
need(users and re.fullmatch(r"\d+(:\d+)?", users[-1]) and users[-1].split(":")[0] != "0", "USER should be numeric")
need(any(re.search(r"useradd .*\bsplitpoint\b", r) for k, r in fin if k == "RUN"), "no user splitpoint created")
# Runtime packages: the words after `apt-get install` up to the next shell operator.
pkgs = []
for k, r in fin:
    if k != "RUN" or "apt-get" not in r:
        continue
    words = shlex.split(r)
    for i, w in enumerate(words):
        if w == "install" and i and words[i - 1] == "apt-get":
            for x in words[i + 1:]:
                if x in ("&&", "||", ";", "|") or x.endswith(";"):
                    break
                if not x.startswith("-"):
                    pkgs.append(x)
need(pkgs, "no apt-get install in the runtime stage")
need("curl" in pkgs, "curl is not installed in the runtime stage (HEALTHCHECK)")
open(__import__("os").environ["WORK"] + "/runtime-packages.txt", "w").write("\n".join(pkgs) + "\n")
print("runtime packages:", " ".join(pkgs))
# .dockerignore: keep build trees and .git out, keep what the build needs in.
patterns = [l.strip() for l in open(".dockerignore") if l.strip() and not l.startswith("#")]
def ignored(path):
    parts = path.split("/")
    res = False
    for p in patterns:
        neg = p.startswith("!")
        p = p.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase("/".join(parts[:n]), p) for n in range(1, len(parts) + 1)):
            res = not neg
    return res
for p in (".git/HEAD", "build/splitpoint", "build-deploy/splitpoint", "build-dev/CMakeCache.txt"):
    need(ignored(p), f".dockerignore does not exclude {p}")
for p in ("deploy/install-deps", "deploy/build", "CMakeLists.txt", "server/main.cpp", "tests/unit/main.cpp"):
    need(not ignored(p), f".dockerignore excludes {p}, which the build needs")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

runtime_libs_covered() {
  local pkgs lib real owner missing=() seen=" "
  [[ -s $work/runtime-packages.txt ]] || { echo "no runtime package list"; return 1; }
  pkgs=" $(tr '\n' ' ' <"$work/runtime-packages.txt") "
  local listed
  for listed in $pkgs; do
    dpkg-query -W "$listed" >/dev/null 2>&1 || { echo "$listed: not a Debian 12 package known here"; missing+=("$listed"); }
  done
  while read -r lib; do
    real=$(readlink -f "$lib")
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null) || { echo "$lib: no package owns it"; missing+=("$lib"); continue; }
    owner=${owner%%:*}
    owner=${owner%%,*}
    [[ $seen == *" $owner "* ]] && continue
    seen+="$owner "
    # Sanitizer runtimes come from instrumented test builds; the image is never one.
    if [[ $owner =~ ^lib(a|ub|t|l)san[0-9]+$ ]]; then
      echo "$lib -> $owner (sanitizer runtime of this build; not for the image)"
      continue
    fi
    if [[ $pkgs == *" $owner "* ]]; then
      echo "$lib -> $owner"
    else
      echo "$lib -> $owner: MISSING from the Dockerfile's runtime apt-get line"
      missing+=("$owner")
    fi
  done < <(ldd "$SP_BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3; next} $1 ~ /^\// {print $1}')
  for listed in $pkgs; do
    [[ $listed == curl || $seen == *" $listed "* ]] || echo "note: $listed is listed but $SP_BIN does not need it"
  done
  ((${#missing[@]} == 0))
}
# The mapping is shown even when it passes: it is what the image will contain.
if libs_out=$(runtime_libs_covered 2>&1); then
  pass "Dockerfile runtime packages cover ldd $SP_BIN"
else
  fail "Dockerfile runtime packages cover ldd $SP_BIN"
fi
# shellcheck disable=SC2001  # indent every line
sed 's/^/      /' <<<"$libs_out"

# ---------------------------------------------------------------- live: proxy + Prometheus
http_get() { # URL -> body on stdout; fails on non-2xx
  curl -fsS --max-time 5 "$1"
}
sp_port=$(free_port)
metrics_port=$(free_port)
prom_port=$(free_port)
live_cfg=$work/live-splitpoint.yaml
# The compose config with its shards on the runner's instances and free local ports.
"$PY" - "$live_cfg" "$sp_port" "$metrics_port" "$PG0_PORT" "$PG1_PORT" <<'PY'
import sys
out, sp, metrics, p0, p1 = sys.argv[1:]
text = open("deploy/compose/splitpoint.yaml").read()
text = text.replace("listen: 0.0.0.0:6432", f"listen: 127.0.0.1:{sp}")
text = text.replace("metrics_listen: 0.0.0.0:9930", f"metrics_listen: 127.0.0.1:{metrics}")
text = text.replace("host: postgres-0, port: 5432", f"host: 127.0.0.1, port: {p0}")
text = text.replace("host: postgres-1, port: 5432", f"host: 127.0.0.1, port: {p1}")
assert text.count("127.0.0.1") == 4, "compose config layout changed; update this test"
# A catalog as well (on s0, in database app): the moves panels' metrics (SPEC §9) exist
# only with one. The compose stack has none (moves need superuser shards, docs/deployment.md).
assert "catalog:" not in text
text += "catalog: s0\n"
open(out, "w").write(text)
PY
on_exit "PGPASSWORD=postgres '$PG_BIN/psql' -X -q -h 127.0.0.1 -p $PG0_PORT -U postgres -d app \
  -c 'DROP SCHEMA IF EXISTS splitpoint CASCADE' >/dev/null 2>&1"
sp_start "$live_cfg" "$work/splitpoint.log" "$sp_port"
wait_port "$metrics_port" 10 || true

# The image's HEALTHCHECK command, run as written (port swapped for the test's).
hc_cmd=$(sed -n '/^HEALTHCHECK/,/[^\\]$/p' Dockerfile | tr -d '\\\n' | sed -E 's/.*CMD +//; s/:9930\//:'"$metrics_port"'\//')
check "Dockerfile HEALTHCHECK command succeeds against the running proxy: $hc_cmd" sh -c "$hc_cmd"
check "GET /healthz (liveness probe)" http_get "http://127.0.0.1:$metrics_port/healthz"

# Some traffic, so that counters move: a single-shard read, a scatter, an error.
url="postgresql://app:secret@127.0.0.1:$sp_port/app"
PGCONNECT_TIMEOUT=5 timeout 30 "$PG_BIN/psql" -X -q "$url" >"$work/traffic.log" 2>&1 <<'SQL' || true
SELECT 1;
SELECT * FROM users WHERE id = 42;
SELECT count(*) FROM users;
SELEC oops;
SQL
metrics_ok() {
  local body name absent=0
  body=$(http_get "http://127.0.0.1:$metrics_port/metrics") || { echo "GET /metrics failed"; return 1; }
  while read -r name; do
    if grep -qE "^# TYPE $name (counter|gauge|histogram)" <<<"$body"; then
      echo "$name"
    else
      echo "$name: NOT EXPOSED by $SP_BIN"
      absent=1
    fi
  done <"$work/used-metrics.txt"
  return "$absent"
}
check "GET /metrics exposes every metric the dashboard and alerts use" metrics_ok

# Prometheus with the standalone config; the target comes from a file_sd file, as
# deploy/prometheus/prometheus.yml documents. Scrape every second to keep this short.
mkdir -p "$work/prom/targets"
cp deploy/prometheus/prometheus.yml deploy/prometheus/alerts.yml "$work/prom/"
sed -i -E 's/^(  (scrape|evaluation)_interval:).*/\1 1s/; s/^(  scrape_timeout:).*/\1 1s/' "$work/prom/prometheus.yml"
printf '[{"targets": ["127.0.0.1:%s"], "labels": {"test": "deploy_files"}}]\n' "$metrics_port" \
  >"$work/prom/targets/splitpoint.json"
prometheus --config.file="$work/prom/prometheus.yml" --storage.tsdb.path="$work/prom/data" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
prom_pid=$!
on_exit "kill $prom_pid 2>/dev/null; wait $prom_pid 2>/dev/null"
wait_port "$prom_port" 30 || { cat "$work/prometheus.log"; fail "prometheus did not start"; }

prom_scrapes() {
  local deadline=$((SECONDS + 60)) r
  while ((SECONDS < deadline)); do
    r=$(curl -fsS --max-time 5 "http://127.0.0.1:$prom_port/api/v1/query" \
      --data-urlencode "query=up{job=\"splitpoint\",test=\"deploy_files\"} == 1 and on (instance) splitpoint_queries_total{route=\"single\"}" 2>/dev/null) || r=""
    if [[ $r == *'"result":[{'* ]]; then
      echo "$r"
      return 0
    fi
    sleep 1
  done
  echo "no successful scrape of 127.0.0.1:$metrics_port within 60s; targets:"
  curl -fsS "http://127.0.0.1:$prom_port/api/v1/targets" || true
  return 1
}
check "Prometheus (deploy/prometheus/prometheus.yml) scrapes the proxy: up == 1, splitpoint_queries_total stored" prom_scrapes

# shellcheck disable=SC2016  # the $names below are Grafana's, literal
prom_evaluates() {
  local expr q r bad=0
  while IFS= read -r expr; do
    [[ -n $expr ]] || continue
    # Grafana's variables, as Grafana would substitute them.
    q=${expr//'$__rate_interval'/1m}
    q=${q//'$__range'/5m}
    q=${q//'$job'/.*}
    q=${q//'$instance'/.*}
    r=$(curl -sS --max-time 10 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$q") || r=""
    if [[ $r == *'"status":"success"'* ]]; then
      echo "ok   $q"
    else
      echo "BAD  $q"
      echo "     $r"
      bad=1
    fi
  done <"$work/exprs.txt"
  return "$bad"
}
check "Prometheus evaluates every dashboard and alert expression" prom_evaluates

# Last, so that a crash here does not hide the results above.
check "GET /readyz (readiness probe) with both shards up" http_get "http://127.0.0.1:$metrics_port/readyz"
check "GET /healthz still answers after /readyz" http_get "http://127.0.0.1:$metrics_port/healthz"

kill "$prom_pid" 2>/dev/null || true
wait "$prom_pid" 2>/dev/null || true
if sp_stop "$SP_PID" && [[ $SP_EXIT_STATUS == 0 ]]; then
  pass "splitpoint exits 0 on SIGTERM (docker stop, Kubernetes)"
else
  fail "splitpoint exit status ${SP_EXIT_STATUS:-?} after SIGTERM (139 = it had crashed); log tail:"
  tail -n 20 "$work/splitpoint.log" | sed 's/^/      /'
fi

echo
if ((failures)); then
  echo "test_deploy_files: $failures check(s) failed"
  exit 1
fi
echo "test_deploy_files: all checks passed"
