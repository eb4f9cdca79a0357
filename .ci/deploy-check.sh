#!/usr/bin/env bash
# Checks the deployment files: the Kubernetes manifests in deploy/k8s against the Kubernetes
# API schemas (kubernetes-validate, which ships them, so no network is needed once installed),
# and docker-compose.yml with Compose v1 and v2 (below: how each is found or installed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE=${AGENTDESK_CI_CACHE:-${HOME:-/root}/.cache/agentdesk-ci}
VENV=$CACHE/venv-deploy
PINS="kubernetes-validate==1.31.0 PyYAML==6.0.2"
K8S_VERSION=1.31.0

if [ "$(cat "$VENV/.agentdesk-pins" 2>/dev/null)" != "$PINS" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    # shellcheck disable=SC2086
    PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install --disable-pip-version-check -q $PINS
    echo "$PINS" >"$VENV/.agentdesk-pins"
fi

echo "Kubernetes manifests (schema $K8S_VERSION, strict):"
for file in deploy/k8s/*.yaml; do
    case $file in */kustomization.yaml) continue ;; esac
    "$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$K8S_VERSION" "$file"
done
# What the schemas cannot say: the probes hit the endpoints agentdesk serves, on the port it
# listens on, and each Deployment's selector matches its pods.
"$VENV/bin/python" - <<'PY'
import glob, sys, yaml
errors = []
for path in sorted(glob.glob("deploy/k8s/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc.get("kind") != "Deployment":
            continue
        name = doc["metadata"]["name"]
        spec = doc["spec"]
        labels = spec["template"]["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
            errors.append(f"{name}: selector does not match the pod labels")
        for c in spec["template"]["spec"]["containers"]:
            if c.get("args", [None])[0] not in ("api", "worker", "serve"):
                errors.append(f"{name}: args must start with api, worker or serve")
            if c["readinessProbe"]["httpGet"]["path"] != "/readyz":
                errors.append(f"{name}: readinessProbe must GET /readyz")
            if c["livenessProbe"]["httpGet"]["path"] != "/healthz":
                errors.append(f"{name}: livenessProbe must GET /healthz")
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            port = env.get("AGENTDESK_ADDR", "").rsplit(":", 1)[-1]
            if str(c["ports"][0]["containerPort"]) != port:
                errors.append(f"{name}: containerPort differs from AGENTDESK_ADDR's port")
            grace = float(env.get("AGENTDESK_SHUTDOWN_GRACE_SECS", "8"))
            if grace >= doc["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30):
                errors.append(f"{name}: the shutdown grace must be shorter than terminationGracePeriodSeconds")
for e in errors:
    print("error:", e)
sys.exit(1 if errors else 0)
PY
echo "deploy/k8s: ok"

# docker-compose.yml with both Compose generations operators use: v1 (Debian's docker-compose
# 1.29, installed when missing and this runs as root) and v2 (the docker compose plugin, or
# Debian trixie's docker-compose 2.x binary, unpacked into the cache: it is one static file).
# Each must accept the file and agree on what matters (check_compose below).
compose_v2_from_debian() {
    local dir=$CACHE/compose-v2 tmp mirror
    if [ ! -x "$dir/docker-compose" ]; then
        [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || return 1
        # The machine's own Debian mirror, for the next release: its own package lists, so that
        # the machine's sources and installed packages stay as they are.
        mirror=$(grep -h -o -E 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
            /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1 | tr -d ' ') || true
        [ -n "$mirror" ] || return 1
        tmp=$(mktemp -d)
        mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" >"$tmp/sources.list"
        local apt_opts=(-q -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
        if apt-get "${apt_opts[@]}" update >/dev/null 2>&1 \
            && (cd "$tmp" && apt-get "${apt_opts[@]}" download docker-compose >/dev/null 2>&1) \
            && dpkg-deb -x "$tmp"/docker-compose_2.*.deb "$tmp/x"; then
            mkdir -p "$dir"
            cp "$tmp/x/usr/libexec/docker/cli-plugins/docker-compose" "$dir/docker-compose"
        fi
        rm -rf "$tmp"
    fi
    [ -x "$dir/docker-compose" ] && echo "$dir/docker-compose"
}

v1=() v2=()
if docker compose version >/dev/null 2>&1; then
    v2=(docker compose)
fi
if command -v docker-compose >/dev/null 2>&1; then
    case $(docker-compose version --short 2>/dev/null) in
        1.*) v1=(docker-compose) ;;
        *) [ ${#v2[@]} -gt 0 ] || v2=(docker-compose) ;;
    esac
fi
if [ ${#v1[@]} -eq 0 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 \
    && apt-cache show docker-compose 2>/dev/null | grep -q '^Version: 1\.'; then
    echo "Installing Debian's docker-compose (v1) to check docker-compose.yml"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null
    v1=(docker-compose)
fi
if [ ${#v2[@]} -eq 0 ] && binary=$(compose_v2_from_debian); then
    v2=("$binary")
fi

# What the file must say, read from `config` (the file as compose understands it, .env and
# env_file resolved), with settings that only the env file carries.
check_compose() {
    local env_file
    env_file=$(mktemp)
    printf '%s\n' AGENTDESK_LOG_FORMAT=json AGENTDESK_RUNTIME_THREADS=1 AGENTDESK_ADDR=127.0.0.1:1 \
        DATABASE_URL=postgres://elsewhere/db >"$env_file"
    AGENTDESK_API_TOKENS=ci-check AGENTDESK_ENV_FILE=$env_file "$@" -f docker-compose.yml config -q
    AGENTDESK_API_TOKENS=ci-check AGENTDESK_ENV_FILE=$env_file "$@" -f docker-compose.yml config \
        | "$VENV/bin/python" -c "$CHECK_COMPOSE"
    rm -f "$env_file"
}
CHECK_COMPOSE=$(cat <<'PY'
import re, sys, yaml
services = yaml.safe_load(sys.stdin)["services"]
errors = []
def seconds(value):
    number, unit = re.fullmatch(r"([0-9.]+)(ms|s|m)?", str(value)).groups()
    return float(number) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[unit]
agentdesk = {n: s for n, s in services.items() if s.get("image") == "agentdesk:latest"}
if sorted(agentdesk) != ["api", "worker"]:
    errors.append(f"the agentdesk image should run api and worker, not {sorted(agentdesk)}")
# One build, one image: the others run what it built and never look for it in a registry.
builders = sorted(n for n, s in services.items() if s.get("build"))
if builders != ["api"]:
    errors.append(f"exactly one service (api) should build the image, not {builders}")
for name, s in agentdesk.items():
    env = {k: ("" if v is None else str(v)) for k, v in (s.get("environment") or {}).items()}
    # Every setting of the env file reaches the container ...
    for key, value in [("AGENTDESK_LOG_FORMAT", "json"), ("AGENTDESK_RUNTIME_THREADS", "1")]:
        if env.get(key) != value:
            errors.append(f"{name}: {key}={value} in the env file does not reach the container (got {env.get(key)!r})")
    # ... except those the compose file owns.
    if env.get("AGENTDESK_ADDR") != "0.0.0.0:8080":
        errors.append(f"{name}: AGENTDESK_ADDR must stay 0.0.0.0:8080 whatever the env file says")
    if "@postgres:5432/" not in env.get("DATABASE_URL", ""):
        errors.append(f"{name}: DATABASE_URL must stay the compose file's postgres")
    if float(env.get("AGENTDESK_SHUTDOWN_GRACE_SECS", "8")) >= seconds(s.get("stop_grace_period", "10s")):
        errors.append(f"{name}: the shutdown grace must be shorter than stop_grace_period")
    if s.get("ports"):
        errors.append(f"{name}: publishes a host port, so --scale {name}=N fails; the proxy publishes the API")
    if name != "api" and s.get("pull_policy") != "never":
        errors.append(f"{name}: runs the image that api builds: pull_policy must be never")
proxy = services.get("proxy") or {}
if not proxy.get("ports"):
    errors.append("proxy: must publish the API's one address")
mounts = [v if isinstance(v, str) else f"{v.get('source')}:{v.get('target')}" for v in proxy.get("volumes", [])]
if not any(m.split(":")[0].endswith("deploy/compose/Caddyfile") for m in mounts):
    errors.append("proxy: must mount deploy/compose/Caddyfile")
caddyfile = open("deploy/compose/Caddyfile").read()
for needle in ["dynamic a api 8080", "flush_interval -1"]:
    if needle not in caddyfile:
        errors.append(f"deploy/compose/Caddyfile: {needle!r} missing (every api replica; unbuffered event streams)")
if re.search(r"^\s*(read_body|write|response_header_timeout|read_timeout|write_timeout)\s", caddyfile, re.M):
    errors.append("deploy/compose/Caddyfile: a read or write timeout would cut event streams")
for e in errors:
    print("error:", e)
sys.exit(1 if errors else 0)
PY
)

checked=0
for generation in v1 v2; do
    declare -n cmd=$generation
    if [ ${#cmd[@]} -eq 0 ]; then
        echo "SKIPPED: docker-compose.yml not checked with Compose $generation (not installed, and not installable here)"
        continue
    fi
    check_compose "${cmd[@]}"
    echo "docker-compose.yml: ok with Compose $generation ($("${cmd[@]}" version --short 2>/dev/null || echo "${cmd[*]}"))"
    checked=$((checked + 1))
done
if [ "$checked" -eq 0 ]; then
    echo "SKIPPED: docker-compose.yml not checked (no docker compose, docker-compose or root to install it)"
fi
if command -v caddy >/dev/null 2>&1; then
    caddy validate --config deploy/compose/Caddyfile --adapter caddyfile >/dev/null 2>&1 \
        || { caddy validate --config deploy/compose/Caddyfile --adapter caddyfile; exit 1; }
    echo "deploy/compose/Caddyfile: ok (caddy $(caddy version | cut -d' ' -f1))"
fi
