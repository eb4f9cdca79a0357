#!/usr/bin/env bash
# Checks the deployment files: the Kubernetes manifests in deploy/k8s against the Kubernetes
# API schemas (kubernetes-validate, which ships them, so no network is needed once installed),
# and docker-compose.yml with `docker compose config` (or docker-compose v1), installing
# Debian's docker-compose when neither is present and this runs as root.
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

compose=()
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's docker-compose to check docker-compose.yml"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose >/dev/null
    compose=(docker-compose)
fi
if [ ${#compose[@]} -eq 0 ]; then
    echo "SKIPPED: docker-compose.yml not checked (no docker compose, docker-compose or root to install it)"
else
    AGENTDESK_API_TOKENS=ci-check "${compose[@]}" -f docker-compose.yml config -q
    echo "docker-compose.yml: ok (${compose[*]} config)"
fi
