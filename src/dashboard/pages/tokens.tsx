import type { TokenRow } from "../../auth/tokens-store";
import { scopeValues } from "../../auth/tokens-store";
import { CsrfField, Empty, Time } from "../ui";

export function TokensPage(props: { tokens: TokenRow[]; csrf: string; created?: { name: string; token: string } }) {
  return (
    <>
      {props.created ? (
        <section class="panel panel-ok" role="status" aria-labelledby="new-token">
          <h2 id="new-token">Token “{props.created.name}” created</h2>
          <p>Copy it now: it is shown only once.</p>
          <p class="token-once">
            <code>{props.created.token}</code>{" "}
            <button type="button" class="copy" data-copy={props.created.token} aria-label="Copy the new token" hidden>
              Copy
            </button>
          </p>
        </section>
      ) : null}
      <form method="post" action="/tokens" class="panel stack">
        <h2>New token</h2>
        <CsrfField csrf={props.csrf} />
        <div>
          <label for="t-name">Name</label>
          <input id="t-name" name="name" required maxlength={100} placeholder="nightly-batch" />
        </div>
        <fieldset class="checks">
          <legend>Scopes</legend>
          {scopeValues.map((scope) => (
            <label>
              <input type="checkbox" name="scopes" value={scope} checked={scope === "read"} /> {scope}
            </label>
          ))}
        </fieldset>
        <div>
          <button type="submit" class="primary">
            Create token
          </button>
        </div>
      </form>
      {props.tokens.length === 0 ? (
        <Empty>No scoped tokens yet; the admin token (ADMIN_TOKEN) is the only way in.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="cards">
            <caption class="visually-hidden">Tokens</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {props.tokens.map((t) => (
                <tr data-token-id={t.id}>
                  <td data-label="Name">
                    <strong>{t.name}</strong>
                    <code class="muted id block">{t.id}</code>
                  </td>
                  <td data-label="Scopes">{t.scopes.join(", ")}</td>
                  <td data-label="Created">
                    <Time at={t.created_at} />
                  </td>
                  <td data-label="Last used">
                    <Time at={t.last_used_at} />
                  </td>
                  <td data-label="State">
                    {t.revoked_at ? (
                      <span>
                        <span class="badge badge-off">revoked</span> <Time at={t.revoked_at} />
                      </span>
                    ) : (
                      <form method="post" action={`/tokens/${t.id}/revoke`} class="inline">
                        <CsrfField csrf={props.csrf} />
                        <button type="submit" class="danger" aria-label={`Revoke ${t.name}`}>
                          Revoke
                        </button>
                      </form>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
