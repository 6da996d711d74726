#!/usr/bin/env bash
# tests/server/run.sh — the OpenAI server under the official client, on a GPU: starts ENGINE on MODEL_DIR with
# --port, runs tests/server/openai_client.mjs against it, then checks a clean shutdown: SIGTERM while a streamed
# request runs lets it finish ([DONE]) and the server exit 0.
#
# Usage: tests/server/run.sh ENGINE MODEL_DIR [extra engine flags]
#   e.g. tests/server/run.sh build/sm_90/qwen3 /tmp/qwen3-chat -np 4 -c 2048
# Needs node (20+) and tests/server/node_modules (npm ci in tests/server). Without a GPU or node it says so and
# exits 0 (skipped).
set -u
cd "$(dirname "$0")/../.."
ENGINE=$1 MODEL=$2
shift 2
if ! nvidia-smi -L >/dev/null 2>&1; then echo "server tests: skipped (no GPU)"; exit 0; fi
if ! command -v node >/dev/null; then echo "server tests: skipped (no node)"; exit 0; fi
if [ ! -d tests/server/node_modules/openai ]; then echo "server tests: skipped (npm ci in tests/server first)"; exit 0; fi
CTX=2048
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp)
"$ENGINE" -m "$MODEL" --port "$PORT" --api-key test-key --alias test-model -c $CTX "$@" 2>"$LOG" &
PID=$!
for i in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    if ! kill -0 $PID 2>/dev/null; then echo "server tests: the server did not start:"; cat "$LOG"; exit 1; fi
    sleep 0.1
done
fail=0
MONOCU_URL="http://127.0.0.1:$PORT/v1" MONOCU_KEY=test-key MONOCU_ALIAS=test-model MONOCU_CTX=$CTX node tests/server/openai_client.mjs || fail=1

# Shutdown: a streamed request running when SIGTERM comes still ends with [DONE]; the server exits 0.
OUT=$(mktemp)
curl -sN "http://127.0.0.1:$PORT/v1/completions" -H "Authorization: Bearer test-key" -H "Content-Type: application/json" \
    -d '{"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": true}' >"$OUT" &
CURL=$!
sleep 0.3
kill -TERM $PID
wait $PID
rc=$?
wait $CURL
if [ $rc -eq 0 ] && tail -c 200 "$OUT" | grep -q '\[DONE\]'; then
    echo "ok   SIGTERM: the running request finished, the server exited 0"
else
    echo "FAIL SIGTERM: server exit $rc; the stream ended with: $(tail -c 200 "$OUT")"
    fail=1
fi
echo "--- server log (tail)"
tail -5 "$LOG"
rm -f "$LOG" "$OUT"
exit $fail
