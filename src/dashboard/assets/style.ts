/** The dashboard's one stylesheet, served by the worker at /assets/dashboard.css. */
export const STYLE = `
:root {
  color-scheme: light dark;
  --bg: #f6f7f9; --surface: #ffffff; --text: #16181d; --muted: #545b66; --line: #d8dce2;
  --accent: #1d4ed8; --accent-text: #ffffff; --danger: #b42318; --danger-text: #ffffff;
  --ok: #11703a; --bad: #b42318; --alarm-bg: #fdecea; --alarm-line: #e8a39b;
  --b-provisioning: #fff4d6; --b-provisioning-t: #6b4a00;
  --b-running: #dcf5e5; --b-running-t: #0b5a2c;
  --b-stopping: #ffe6d5; --b-stopping-t: #8a3300;
  --b-stopped: #e8eaee; --b-stopped-t: #3c424c;
  --focus: #f59e0b;
  --c0: #2563eb; --c1: #c2410c; --c2: #047857; --c3: #7e22ce; --c4: #be185d; --c5: #4b5563; --grid: #e5e7eb;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  font-size: 16px; line-height: 1.45;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1115; --surface: #181b21; --text: #e8eaee; --muted: #a3aab5; --line: #2e333c;
    --accent: #8fb0ff; --accent-text: #0f1115; --danger: #ff8a80; --danger-text: #1a0b0a;
    --ok: #7fdca0; --bad: #ff9b91; --alarm-bg: #3a1613; --alarm-line: #7a2e27;
    --b-provisioning: #3b2f0b; --b-provisioning-t: #ffd97a;
    --b-running: #0f3520; --b-running-t: #8ff0b4;
    --b-stopping: #3f220d; --b-stopping-t: #ffbe8f;
    --b-stopped: #2a2e35; --b-stopped-t: #c9ced6;
    --c0: #8fb0ff; --c1: #fdba74; --c2: #6ee7b7; --c3: #d8b4fe; --c4: #f9a8d4; --c5: #cbd5e1; --grid: #2a2f38;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text); }
a { color: var(--accent); }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.9em; overflow-wrap: anywhere; }
h1 { font-size: 1.5rem; margin: 0 0 1rem; }
h2 { font-size: 1.15rem; margin: 1.75rem 0 0.75rem; }
.num, td.r, .r { font-variant-numeric: tabular-nums; }
.r { text-align: right; }
.muted { color: var(--muted); }
.small { font-size: 0.85rem; }
.block { display: block; }
.ok { color: var(--ok); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
.visually-hidden { position: absolute !important; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.skip { position: absolute; left: -999px; top: 0; background: var(--surface); padding: 0.5rem 1rem; z-index: 10; }
.skip:focus { left: 0.5rem; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }

.top { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.5rem; padding: 0.75rem 1.25rem;
  background: var(--surface); border-bottom: 1px solid var(--line); }
.brand { font-weight: 700; font-size: 1.1rem; color: var(--text); text-decoration: none; letter-spacing: 0.01em; }
.top nav ul { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; list-style: none; margin: 0; padding: 0; }
.top nav a { text-decoration: none; color: var(--muted); padding: 0.25rem 0; border-bottom: 2px solid transparent; }
.top nav a:hover { color: var(--text); }
.top nav a[aria-current="page"] { color: var(--text); border-bottom-color: var(--accent); font-weight: 600; }
.signout { margin-left: auto; display: flex; align-items: center; gap: 0.5rem; }
main { max-width: 80rem; margin: 0 auto; padding: 1.5rem 1.25rem 3rem; }

.alarms { max-width: 80rem; margin: 1rem auto 0; padding: 0 1.25rem; }
.alarm { background: var(--alarm-bg); border: 1px solid var(--alarm-line); border-radius: 8px; padding: 0.75rem 1rem; margin: 0 0 0.5rem; }

.panel { background: var(--surface); border: 1px solid var(--line); border-radius: 10px; padding: 1rem 1.25rem; margin: 0 0 1.25rem; }
.panel h2 { margin-top: 0; }
.panel-error { border-color: var(--alarm-line); background: var(--alarm-bg); }
.panel-ok { border-color: var(--ok); }
.panel-notice { background: var(--b-provisioning); color: var(--b-provisioning-t); border-color: var(--b-provisioning-t); }
.empty { background: var(--surface); border: 1px dashed var(--line); border-radius: 10px; padding: 1.25rem; color: var(--muted); }

.table-wrap { margin: 0 0 1.25rem; overflow-x: auto; background: var(--surface); border: 1px solid var(--line); border-radius: 10px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.6rem 0.75rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-size: 0.8rem; text-transform: uppercase; letter-spacing: 0.04em; color: var(--muted); font-weight: 600; }
tbody tr:last-child td { border-bottom: 0; }
td.actions { text-align: right; white-space: nowrap; }
.lease-name { font-weight: 600; }
code.id { white-space: nowrap; font-size: 0.78rem; }
ul.access { list-style: none; margin: 0; padding: 0; }
ul.access li { margin: 0 0 0.25rem; }

.badge { display: inline-block; padding: 0.1rem 0.55rem; border-radius: 999px; font-size: 0.8rem; font-weight: 600; }
.badge-provisioning { background: var(--b-provisioning); color: var(--b-provisioning-t); }
.badge-running { background: var(--b-running); color: var(--b-running-t); }
.badge-stopping { background: var(--b-stopping); color: var(--b-stopping-t); }
.badge-stopped { background: var(--b-stopped); color: var(--b-stopped-t); }
.badge-on { background: var(--b-running); color: var(--b-running-t); }
.badge-off { background: var(--b-stopped); color: var(--b-stopped-t); }

button, .button { font: inherit; border-radius: 8px; border: 1px solid var(--line); background: var(--surface); color: var(--text);
  padding: 0.4rem 0.9rem; cursor: pointer; text-decoration: none; display: inline-block; }
button:hover { border-color: var(--muted); }
button:disabled { opacity: 0.5; cursor: not-allowed; }
button.primary, .button.primary { background: var(--accent); color: var(--accent-text); border-color: var(--accent); font-weight: 600; }
button.danger { background: var(--danger); color: var(--danger-text); border-color: var(--danger); font-weight: 600; }
button.link { background: none; border: 0; padding: 0; color: var(--accent); text-decoration: underline; }
button.copy { padding: 0.1rem 0.5rem; font-size: 0.8rem; }
form.inline { display: inline; }

form.stack { display: grid; gap: 0.9rem; max-width: 34rem; }
.grid { display: grid; gap: 0.9rem 1rem; grid-template-columns: repeat(auto-fit, minmax(11rem, 1fr)); align-items: end; }
label { display: block; font-weight: 600; font-size: 0.9rem; margin-bottom: 0.25rem; }
.hint { display: block; font-weight: 400; color: var(--muted); font-size: 0.8rem; }
input, select, textarea { font: inherit; width: 100%; padding: 0.45rem 0.6rem; border-radius: 8px; border: 1px solid var(--muted);
  background: var(--bg); color: var(--text); }
input[type="checkbox"] { width: auto; }
fieldset { border: 1px solid var(--line); border-radius: 8px; padding: 0.75rem 1rem; }
legend { font-weight: 600; font-size: 0.9rem; padding: 0 0.25rem; }
.checks label { display: inline-flex; gap: 0.4rem; align-items: center; margin-right: 1rem; font-weight: 400; }

dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.4rem 1.25rem; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
dl.facts ol.creates { margin: 0; padding-left: 1.25rem; }
dl.facts ul.spec { margin: 0; padding: 0; list-style: none; }
dl.facts ul.spec code { overflow-wrap: anywhere; }
.cards-grid { display: grid; gap: 1rem; grid-template-columns: repeat(auto-fit, minmax(15rem, 1fr)); margin-bottom: 1.25rem; }
.figure { font-size: 1.6rem; font-weight: 700; font-variant-numeric: tabular-nums; }
meter { width: 100%; height: 0.9rem; }
ol.events { list-style: none; margin: 0; padding: 0; }
ol.events { padding: 0; }
ol.events li { padding: 0.5rem 1rem; border-bottom: 1px solid var(--line); }
ol.events li:last-child { border-bottom: 0; }
ol.events .kind { font-weight: 600; }
ol.events time { color: var(--muted); font-size: 0.85rem; font-variant-numeric: tabular-nums; }
.worst { font-size: 1.25rem; }
.login { max-width: 26rem; margin: 12vh auto; }
.token-once { background: var(--b-running); color: var(--b-running-t); padding: 0.75rem; border-radius: 8px; word-break: break-all; }

.chart { margin: 0 0 1rem; background: var(--surface); border: 1px solid var(--line); border-radius: 10px; padding: 0.75rem; }
.chart svg { display: block; width: 100%; height: auto; max-height: 22rem; }
.chart text { fill: var(--muted); font-size: 13px; font-family: inherit; }
.chart-tick line { stroke: var(--grid); stroke-width: 1; }
.chart-axis { stroke: var(--line); stroke-width: 1.5; }
.chart-line line { stroke: var(--bad); stroke-width: 2; stroke-dasharray: 6 4; }
.chart .chart-line text { fill: var(--bad); font-weight: 600; }
.chart-s0 { fill: var(--c0); background: var(--c0); }
.chart-s1 { fill: var(--c1); background: var(--c1); }
.chart-s2 { fill: var(--c2); background: var(--c2); }
.chart-s3 { fill: var(--c3); background: var(--c3); }
.chart-s4 { fill: var(--c4); background: var(--c4); }
.chart-s5 { fill: var(--c5); background: var(--c5); }
.chart-alarm { fill: var(--bad); background: var(--bad); }
.chart-legend { display: flex; flex-wrap: wrap; gap: 0.35rem 1.1rem; margin-top: 0.5rem; color: var(--muted); }
.chart-legend > span { display: inline-flex; align-items: center; gap: 0.4rem; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; border-radius: 3px; }
.swatch-line { height: 0; border-top: 2px dashed var(--bad); border-radius: 0; }
.chart-grid { display: grid; gap: 1rem; grid-template-columns: minmax(0, 3fr) minmax(14rem, 1fr); align-items: start; }
.table-wrap.scroll table th, .table-wrap.scroll table td { padding: 0.35rem 0.6rem; white-space: nowrap; }
.table-wrap.scroll tbody th { text-transform: none; letter-spacing: 0; font-size: inherit; color: var(--text); font-weight: 600; }
.table-wrap.scroll tbody tr:last-child th { border-bottom: 0; }
table.runs a { overflow-wrap: anywhere; }
details.figures { margin: 0 0 1.25rem; }
details.figures > summary { cursor: pointer; color: var(--accent); margin: 0 0 0.5rem; }

@media (max-width: 900px) {
  .chart-grid { grid-template-columns: minmax(0, 1fr); }
}
@media (max-width: 700px) {
  .chart { padding: 0.5rem; }
  .chart text { font-size: 21px; }
  .table-wrap.scroll { overflow-x: auto; background: var(--surface); border: 1px solid var(--line); }
  .top { padding: 0.6rem 1rem; }
  .signout { margin-left: 0; width: 100%; justify-content: space-between; }
  main { padding: 1rem 0.75rem 2rem; }
  .alarms { padding: 0 0.75rem; }
  .table-wrap { background: none; border: 0; overflow: visible; }
  table.cards thead { display: none; }
  table.cards, table.cards tbody, table.cards tr, table.cards td { display: block; width: 100%; }
  table.cards tr { background: var(--surface); border: 1px solid var(--line); border-radius: 10px; margin: 0 0 0.75rem; padding: 0.25rem 0; }
  table.cards td { position: relative; border: 0; padding: 0.35rem 0.9rem 0.35rem 9rem; text-align: left; min-height: 2rem; }
  table.cards td::before { content: attr(data-label); position: absolute; left: 0.9rem; top: 0.45rem; width: 7.5rem; color: var(--muted); font-size: 0.75rem; font-weight: 600; text-transform: uppercase; letter-spacing: 0.03em; }
  table.cards td.actions { padding-top: 0.6rem; padding-bottom: 0.6rem; }
  table.cards td.actions::before { content: none; }
  table.cards td.actions { text-align: left; }
  table.cards td.r { text-align: left; }
  ol.events time { display: block; }
}
`;
