// The rollout inspector: a read-only view of the scheduler's batches, groups and episodes. Plain DOM, no build
// step: the scheduler serves this file as is. Every value from the API goes into the page as text (model
// output is untrusted), never as HTML.
'use strict';
(function () {
  const app = document.getElementById('app');
  const crumbs = document.getElementById('crumbs');
  const refreshed = document.getElementById('refreshed');
  const kTokenKey = 'corral-token';
  const kMaxTokens = 20000;

  // A token passed as ?token=… is kept for the tab and taken out of the address bar.
  const query = new URLSearchParams(location.search);
  if (query.get('token')) {
    sessionStorage.setItem(kTokenKey, query.get('token'));
    history.replaceState(null, '', location.pathname + location.hash);
  }

  // h('div', {class: 'x', href: …}, child, 'text', [children]) builds an element; strings become text nodes.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'style') Object.assign(el.style, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  async function api(path) {
    const headers = {};
    const token = sessionStorage.getItem(kTokenKey);
    if (token) headers.Authorization = 'Bearer ' + token;
    const response = await fetch(path, { headers });
    let body;
    try { body = await response.json(); } catch (e) { body = { error: response.statusText }; }
    if (!response.ok) {
      const err = new Error(body.error || response.statusText);
      err.status = response.status;
      throw err;
    }
    return body;
  }

  // ---- formatting ----
  // Ids are [A-Za-z0-9_:-]: links keep them readable.
  const enc = (id) => encodeURIComponent(id).replace(/%3A/gi, ':');
  const fmtReward = (r) => (r === undefined || r === null ? '–' : Number(r).toFixed(3).replace(/\.?0+$/, '') || '0');
  const seconds = (d) => (d ? parseFloat(d) : 0);  // proto JSON durations: "1.250s"
  function fmtSeconds(s) {
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 120) return s.toFixed(1) + ' s';
    return (s / 60).toFixed(1) + ' min';
  }
  const fmtTime = (t) => (t ? new Date(t).toLocaleString() : '–');
  const shortStatus = (s) => (s || '').replace(/^EPISODE_STATUS_|^BATCH_STATE_/, '');
  const pill = (text, cls) => h('span', { class: 'pill s-' + (cls || text) }, text);
  function decodeBytes(b64) {
    if (!b64) return '';
    const raw = atob(b64);
    return new TextDecoder().decode(Uint8Array.from(raw, (c) => c.charCodeAt(0)));
  }
  // Reward in [lo, hi] -> a red-to-green background.
  function rewardColor(r, lo, hi) {
    if (r === undefined || r === null) return '#f0f0f0';
    const x = hi > lo ? Math.min(1, Math.max(0, (r - lo) / (hi - lo))) : 0.5;
    return 'hsl(' + Math.round(x * 120) + ', 60%, 86%)';
  }

  function histogram(hist, big) {
    const max = Math.max(1, ...hist.counts);
    const bars = hist.counts.map((c, i) => {
      const from = hist.lo + ((hist.hi - hist.lo) * i) / hist.counts.length;
      const to = hist.lo + ((hist.hi - hist.lo) * (i + 1)) / hist.counts.length;
      const last = i === hist.counts.length - 1;
      return h('div', { title: c + ' episode(s) with reward in [' + fmtReward(from) + ', ' + fmtReward(to) + (last ? ']' : ')'),
                        style: { height: Math.max(2, (100 * c) / max) + '%', opacity: c ? 0.85 : 0.15 } });
    });
    const chart = h('div', { class: 'hist' + (big ? ' big' : '') }, bars);
    if (!big) return chart;
    return h('div', { style: { display: 'inline-block' } }, chart,
             h('div', { class: 'hist-axis' }, h('span', {}, fmtReward(hist.lo)), h('span', {}, fmtReward(hist.hi))));
  }

  function setCrumbs(...parts) {
    crumbs.replaceChildren(...parts.flatMap((p, i) => (i ? [' / ', p] : [p])));
  }

  // ---- views ----
  async function batchesView() {
    const data = await api('/api/batches?page_size=100');
    setCrumbs(h('a', { href: '#/' }, 'batches'));
    if (!data.batches.length) {
      return [h('h1', {}, 'Batches'), h('p', { class: 'muted' }, 'No batches yet: submit one (corral run, the Python SDK).')];
    }
    const rows = data.batches.map((b) => {
      const c = b.counts || {};
      const progress = b.progress || 0;
      return h('tr', { class: 'batch-row' },
        h('td', {}, h('a', { href: '#/batch/' + enc(b.batch_id), class: 'mono' }, b.batch_id)),
        h('td', {}, pill(shortStatus(b.state))),
        h('td', {}, h('div', { class: 'bar', title: Math.round(progress * 100) + '%' },
                      h('div', { style: { width: progress * 100 + '%' } }))),
        h('td', {}, (c.total || 0) + ' (' + (b.task_count || 0) + ' × ' + ((b.spec || {}).group_size || 1) + ')'),
        h('td', {}, (c.finished || 0) + ' / ' + ((c.failed || 0) + (c.timeout || 0) + (c.no_data || 0)) + ' / ' + (c.cancelled || 0)),
        h('td', { class: 'mean-reward' }, fmtReward(b.mean_reward)),
        h('td', {}, histogram(b.reward_histogram)),
        h('td', { class: 'muted' }, fmtTime(b.create_time)));
    });
    return [h('h1', {}, 'Batches'),
            h('table', { id: 'batches' },
              h('tr', {}, ['batch', 'state', 'progress', 'episodes', 'finished / failed / cancelled', 'mean reward',
                           'rewards', 'created'].map((t) => h('th', {}, t))),
              rows)];
  }

  async function batchView(id) {
    const data = await api('/api/batch?id=' + enc(id));
    const b = data.batch;
    const c = b.counts || {};
    setCrumbs(h('a', { href: '#/' }, 'batches'), h('a', { href: '#/batch/' + enc(id) }, id));
    const card = (label, value) => h('div', { class: 'card' }, h('b', {}, value), h('span', { class: 'muted' }, label));
    const hist = data.reward_histogram;
    const groups = data.groups.map((g) => h('tr', { class: 'group' },
      h('td', { class: 'mono' }, String(g.group_index)),
      h('td', { class: 'mono' }, g.task_id),
      h('td', { class: 'prompt' }, g.prompt),
      h('td', {}, fmtReward(g.mean_reward)),
      h('td', {}, h('div', { class: 'rollouts' }, g.episodes.map((e) => {
        const label = e.state !== 'ended' ? pill(e.state) : e.redundant ? pill('redundant') : shortStatus(e.status);
        return h('a', { class: 'rollout', href: '#/episode/' + enc(e.episode_id),
                        title: e.episode_id + (e.attempt > 1 ? ' (attempt ' + e.attempt + ')' : ''),
                        style: { background: rewardColor(e.reward, hist.lo, hist.hi) } },
                 h('b', {}, fmtReward(e.reward)), label);
      })))));
    return [
      h('h1', {}, 'Batch ', h('span', { class: 'mono', id: 'batch-id' }, id), ' ', pill(shortStatus(b.state))),
      h('div', { class: 'cards' },
        card('progress', Math.round((b.progress || 0) * 100) + '%'),
        card('episodes', String(c.total || 0)),
        card('finished', String(c.finished || 0)),
        card('failed', String(c.failed || 0)),
        card('timeout', String(c.timeout || 0)),
        card('no data', String(c.no_data || 0)),
        card('cancelled', String(c.cancelled || 0)),
        card('retries', String(c.retries || 0)),
        card('mean reward', fmtReward(b.mean_reward)),
        h('div', { class: 'card' }, histogram(hist, true), h('div', { class: 'muted' }, 'reward distribution'))),
      usageCards(b.usage, card),
      h('p', { class: 'muted' }, 'created ' + fmtTime(b.create_time) + (b.end_time ? ' · ended ' + fmtTime(b.end_time) : '')),
      h('h2', {}, 'Groups (' + data.groups.length + ')'),
      h('table', { class: 'groups', id: 'groups' },
        h('tr', {}, ['group', 'task', 'prompt', 'mean reward', 'rollouts (reward, status)'].map((t) => h('th', {}, t))),
        groups),
    ];
  }

  function timeline(t) {
    if (!t) return null;
    const agent = Math.max(0, seconds(t.agent) - seconds(t.tools));
    const phases = [['queue', seconds(t.queue)], ['acquire', seconds(t.sandbox_acquire)], ['setup', seconds(t.setup)],
                    ['agent', agent], ['tools', seconds(t.tools)], ['verifier', seconds(t.verifier)]];
    const total = phases.reduce((s, [, d]) => s + d, 0);
    if (total <= 0) return null;
    return [
      h('div', { class: 'timeline', id: 'timeline' }, phases.filter(([, d]) => d > 0).map(([name, d]) =>
        h('div', { class: 'ph-' + name, title: name + ' ' + fmtSeconds(d), style: { width: (100 * d) / total + '%' } },
          name + ' ' + fmtSeconds(d)))),
      h('div', { class: 'legend' }, phases.filter(([, d]) => d > 0).map(([name, d]) =>
        h('span', {}, h('i', { class: 'ph-' + name }), name + ' ' + fmtSeconds(d)))),
    ];
  }

  function message(m) {
    const msg = m.message || {};
    const body = [];
    if (msg.reasoning_content) body.push(h('pre', { class: 'muted' }, msg.reasoning_content));
    if (msg.content) body.push(h('pre', {}, msg.content));
    for (const call of msg.tool_calls || []) {
      body.push(h('div', { class: 'toolcall' }, h('b', {}, '→ ' + (call.function_name || 'tool') + ' '),
                  h('code', {}, call.arguments || '')));
    }
    const tokens = (m.token_ids || []).length;
    return h('div', { class: 'msg' + (m.generated ? ' generated' : ''), 'data-role': msg.role },
      h('div', { class: 'role' }, msg.role + (msg.name ? ' · ' + msg.name : '') +
        (msg.tool_call_id ? ' · ' + msg.tool_call_id : ''),
        m.generated ? pill('generated · ' + roleName(m.role) + (tokens ? ', ' + tokens + ' tokens' : ''), 'FINISHED')
                    : null),
      body);
  }

  function tokenView(branch) {
    const ids = branch.token_ids || [];
    if (!ids.length) return h('p', { class: 'muted' }, 'No token ids were recorded for this branch.');
    const mask = branch.token_generated || [];
    const logprobs = branch.token_logprobs || [];
    const generated = mask.filter(Boolean).length;
    const shown = ids.slice(0, kMaxTokens).map((id, i) => h('span', {
      class: 'tok' + (mask[i] ? ' gen' : ''),
      title: (mask[i] ? 'generated (loss mask 1)' : 'prompt (loss mask 0)') + ' · id ' + id +
             (mask[i] && logprobs.length ? ' · logprob ' + Number(logprobs[i]).toFixed(4) : ''),
    }, String(id)));
    return [
      h('p', { class: 'muted' }, ids.length + ' tokens, ' + generated + ' generated (highlighted: the loss mask is 1 on them)' +
        (branch.tokens_consistent ? '' : ' · the recorded token ids do not line up with a single prompt: check before training') +
        (ids.length > kMaxTokens ? ' · first ' + kMaxTokens + ' shown' : '')),
      h('div', { class: 'tokens', id: 'tokens' }, shown),
    ];
  }

  // A CallRole (its enum name in the API's JSON) as the trainer reads it: "agent", "auxiliary", ...; trajectories
  // recorded before roles have none: "agent".
  function roleName(role) {
    return role ? role.replace('CALL_ROLE_', '').toLowerCase() : 'agent';
  }

  // What a batch cost (Batch.usage): CPU-hours, GiB-hours, tokens and cost, where measured.
  function usageCards(u, card) {
    if (!u || !u.episodes) return h('div', { class: 'cards', id: 'usage' });
    const n = (v) => Number(v || 0);
    const measured = n(u.episodes_measured) > 0;
    return h('div', { class: 'cards', id: 'usage' },
      card('CPU-hours', measured ? (n(u.cpu_seconds) / 3600).toFixed(3) : 'not measured'),
      card('GiB-hours', measured ? (n(u.memory_gib_seconds) / 3600).toFixed(3) : 'not measured'),
      card('sandbox-hours', measured ? (n(u.sandbox_seconds) / 3600).toFixed(3) : 'not measured'),
      card('prompt tokens', n(u.prompt_tokens).toLocaleString()),
      card('completion tokens', n(u.completion_tokens).toLocaleString()),
      card('tool calls', n(u.tool_calls).toLocaleString()),
      u.cost !== undefined ? card('cost', n(u.cost).toFixed(4)) : null);
  }

  // What an episode cost (EpisodeResult.usage), as name/value rows; what was not measured is left out.
  function usageRows(u) {
    if (!u) return [];
    const sb = u.sandbox || {};
    const secs = (d) => (d === undefined ? undefined : fmtSeconds(parseFloat(d)));
    const mib = (b) => (b === undefined ? undefined : (Number(b) / 1048576).toFixed(1) + ' MiB');
    const model = u.model || {};
    const tools = u.tools || {};
    return [
      ['CPU', sb.cpu_time === undefined ? 'not measured' : secs(sb.cpu_time) + (sb.cpu_user_time === undefined ? '' :
        ' (user ' + secs(sb.cpu_user_time) + ', system ' + secs(sb.cpu_system_time || '0s') + ')')],
      ['memory', sb.memory_peak_bytes !== undefined ? 'peak ' + mib(sb.memory_peak_bytes) + ', ' +
        Number(sb.memory_gib_seconds || 0).toFixed(3) + ' GiB·s' : undefined],
      ['disk', sb.own_disk_bytes !== undefined ? mib(sb.own_disk_bytes) + ' own' +
        (Number(sb.shared_disk_bytes || 0) > 0 ? ', ' + mib(sb.shared_disk_bytes) + ' shared' : '') : undefined],
      ['sandbox', sb.wall_time !== undefined ? secs(sb.wall_time) + ' alive, ' + secs(sb.busy_time || '0s') +
        ' busy, ' + (sb.processes_started || 0) + ' process(es)' : undefined],
      ['model', (model.calls || 0) + ' call(s), ' + Number(model.prompt_tokens || 0).toLocaleString() + ' prompt + ' +
        Number(model.completion_tokens || 0).toLocaleString() + ' completion tokens, ' + secs(model.wait_time || '0s') +
        ' waiting'],
      ['tools', (tools.by_tool || []).map((t) => t.name + ' ×' + t.calls + ' ' + secs(t.time)).join(', ') || undefined],
      ['verifier', u.verifier ? secs(u.verifier.wall_time) + (u.verifier.cpu_time !== undefined ?
        ' (CPU ' + secs(u.verifier.cpu_time) + ')' : '') : undefined],
      ['cost', u.cost !== undefined ? Number(u.cost).toFixed(4) : undefined],
    ];
  }

  async function episodeView(id, branchArg) {
    const data = await api('/api/episode?id=' + enc(id));
    const r = data.result;
    const ids = r.ids || {};
    const status = shortStatus(r.status);
    setCrumbs(h('a', { href: '#/' }, 'batches'),
              h('a', { href: '#/batch/' + enc(ids.batch_id) }, ids.batch_id),
              h('a', { href: '#/episode/' + enc(id) }, 'group ' + (ids.group_index || 0) + ' · rollout ' +
                (ids.index_in_group || 0)));
    const trajectory = r.trajectory || {};
    const branches = trajectory.branches || [];
    const bi = Math.min(Math.max(0, parseInt((branchArg || 'b0').slice(1), 10) || 0), Math.max(0, branches.length - 1));
    const branch = branches[bi];
    const kv = (pairs) => h('dl', { class: 'kv' }, pairs.filter(([, v]) => v !== undefined && v !== '' && v !== null)
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    const out = [
      h('h1', {}, 'Episode ', h('span', { class: 'mono', id: 'episode-id' }, id), ' ', pill(status)),
      kv([['reward', h('b', { id: 'reward' }, fmtReward(r.reward))],
          ['step rewards', (r.step_rewards || []).map(fmtReward).join(', ')],
          ['task', ids.task_id], ['attempt', ids.attempt], ['seed', ids.seed],
          ['host', r.host_address ? r.host_address + (r.sandbox_id ? ' · sandbox ' + r.sandbox_id : '') +
                   (r.warm_sandbox ? ' (warm)' : '') : undefined],
          ['LLM calls', r.llm_calls], ['tool calls', r.tool_calls],
          ['failure', r.failure_message ? h('span', { class: 'error', id: 'failure' },
            shortStatus(r.failure_class).replace('FAILURE_CLASS_', '') + ' in ' +
            (r.failed_phase || '').replace('EPISODE_PHASE_', '') + ': ' + r.failure_message) : undefined],
          ['from', data.source === 'journal' ? 'the journal (acknowledged by the trainer)' : 'the scheduler (not acknowledged yet)']]),
      h('h2', {}, 'Phases'),
      timeline(r.timings) || h('p', { class: 'muted' }, 'No timings.'),
      h('h2', {}, 'Usage'),
      h('div', { id: 'episode-usage' }, kv(usageRows(r.usage))),
    ];
    if (r.reward_details_json) {
      let details = r.reward_details_json;
      try { details = JSON.stringify(JSON.parse(details), null, 2); } catch (e) { /* shown as is */ }
      out.push(h('h2', {}, 'Reward details'), h('pre', { class: 'out' }, details));
    }
    const roles = trajectory.calls_by_role || {};
    const counts = ['agent', 'auxiliary', 'retry', 'compaction', 'subagent'].filter((k) => roles[k])
      .map((k) => roles[k] + ' ' + k).join(', ');
    if (counts) out.splice(2, 0, kv([['calls by role', h('span', { id: 'role-counts' }, counts)]]));
    if (branches.length > 1) {
      out.push(h('h2', {}, 'Branches'), h('div', { class: 'branches' }, branches.map((b, i) =>
        h('a', { href: '#/episode/' + enc(id) + '/b' + i, class: i === bi ? 'current' : null,
                 title: b.role_reason || null },
          'branch ' + b.branch_id + ' · ' + roleName(b.role) + ' (' + (b.messages || []).length + ' messages' +
          (b.parent_branch !== undefined ? ', from ' + b.parent_branch : '') +
          (b.linked_branch !== undefined ? ', continues ' + b.linked_branch : '') + ')'))));
    }
    if (branch) {
      out.push(h('h2', {}, 'Conversation' + (branches.length > 1 ? ' (branch ' + branch.branch_id + ')' : '')),
               h('p', { class: 'muted', id: 'branch-role' }, 'role: ' + roleName(branch.role) +
                 (branch.role_reason ? ' — ' + branch.role_reason : '')),
               h('div', { class: 'conversation', id: 'conversation' }, (branch.messages || []).map(message)),
               h('h2', {}, 'Tokens as the loss mask sees them'), tokenView(branch));
    } else {
      out.push(h('h2', {}, 'Conversation'), h('p', { class: 'muted' }, 'No LLM call was recorded.'));
    }
    const agentTail = decodeBytes(r.agent_output_tail);
    const verifierTail = decodeBytes(r.verifier_output_tail);
    if (agentTail) {
      out.push(h('h2', {}, 'Agent output (last bytes)' + (r.agent_exit_code !== undefined ? ', exit ' + r.agent_exit_code : '')),
               h('pre', { class: 'out' }, agentTail));
    }
    if (verifierTail) {
      out.push(h('h2', {}, 'Verifier output (last bytes)' + (r.verifier_exit_code !== undefined ? ', exit ' + r.verifier_exit_code : '')),
               h('pre', { class: 'out' }, verifierTail));
    }
    return out;
  }

  function tokenForm() {
    const input = h('input', { type: 'password', placeholder: 'cluster token (corral ui prints a link with it)' });
    return h('form', { class: 'token', onsubmit: (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(kTokenKey, input.value.trim());
      render();
    } }, h('p', {}, 'This scheduler asks for the cluster token.'), input, ' ', h('button', {}, 'Open'));
  }

  // ---- routing: #/, #/batch/<id>, #/episode/<id>[/b<branch>] ----
  let timer = null;
  let generation = 0;
  async function render() {
    const mine = ++generation;
    clearTimeout(timer);
    const [kind, id, extra] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    let live = false;
    try {
      let nodes;
      if (kind === 'batch' && id) {
        nodes = await batchView(id);
        live = /RUNNING/.test(nodes[0].textContent);  // the heading's state pill
      } else if (kind === 'episode' && id) {
        nodes = await episodeView(id, extra);
      } else {
        nodes = await batchesView();
        live = true;
      }
      if (mine !== generation) return;
      app.replaceChildren(...nodes.flat().filter(Boolean));
      refreshed.textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (err) {
      if (mine !== generation) return;
      app.replaceChildren(err.status === 401 ? tokenForm() : h('p', { class: 'error', id: 'error' }, String(err.message)));
    }
    document.body.dataset.ready = '1';  // for headless tests: the first render is done
    if (live) timer = setTimeout(() => { if (mine === generation) render(); }, 3000);
  }
  window.addEventListener('hashchange', render);
  render();
})();
