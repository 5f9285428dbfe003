import { raw } from "hono/html";
import { DocumentHead } from "../ui";

export function LoginPage(props: { next: string; message?: string; error?: string }) {
  return (
    <>
      {raw("<!doctype html>")}
      <html lang="en">
        <DocumentHead title="Sign in" />
        <body>
          <main class="login">
            <h1>gpulease</h1>
            {props.message ? (
              <p class="panel" role="status">
                {props.message}
              </p>
            ) : null}
            {props.error ? (
              <p class="panel panel-error" role="alert">
                {props.error}
              </p>
            ) : null}
            <form method="post" action="/login" class="panel stack">
              <input type="hidden" name="next" value={props.next} />
              <div>
                <label for="token">
                  API token
                  <span class="hint">
                    The admin token (ADMIN_TOKEN; locally in <code>.dev.vars</code>) or a scoped token starting with{" "}
                    <code>gl_</code>. What the token may do, you may do here.
                  </span>
                </label>
                <input id="token" name="token" type="password" autocomplete="current-password" required autofocus />
              </div>
              <div>
                <button type="submit" class="primary">
                  Sign in
                </button>
              </div>
            </form>
          </main>
        </body>
      </html>
    </>
  );
}
