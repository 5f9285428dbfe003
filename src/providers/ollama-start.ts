/**
 * The container start of a model lease on the stock Ollama image: the server, then a pull of
 * `$GPULEASE_MODEL` that the container itself waits on. Ollama downloads a blob only while some
 * pull waits on it (ollama/ollama `server/download.go`: the last waiter going away cancels the download), so the
 * pull must outlive any keeper invocation: the machine holds it, the keeper only watches
 * (`probeOllama`). The keeper's one-token generation then loads the model (keep_alive -1).
 */
export const OLLAMA_START_SCRIPT =
  'ollama serve & until ollama list >/dev/null 2>&1; do sleep 1; done; ollama pull "$GPULEASE_MODEL"; wait';

/** The entrypoint override that runs it (the image's own ENTRYPOINT is /bin/ollama). */
export const OLLAMA_START_ENTRYPOINT = ["/bin/sh", "-c"];

/** True for a machine spec whose container must pull a model itself. */
export const pullsModel = (spec: { template: string; env: Record<string, string> }): boolean =>
  spec.template === "ollama" && Boolean(spec.env.GPULEASE_MODEL);
