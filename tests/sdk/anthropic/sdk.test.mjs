// The official @anthropic-ai/sdk npm package against corral-proxy's /v1/messages, started (with corral-fake-llm,
// which speaks only chat completions, behind it) by tests/integration/proxy_sdk_test.cc, which passes the base
// URL and session tokens in the environment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.CORRAL_ANTHROPIC_BASE_URL;
const client = (apiKey) => new Anthropic({ apiKey, baseURL, maxRetries: 0, timeout: 20000 });
const claude = client(process.env.CORRAL_TOKEN);  // the env token as x-api-key, as Claude Code sends it
const user = (content) => [{ role: 'user', content }];

test('a message', async () => {
  const m = await claude.messages.create({ model: 'claude-sonnet-4', max_tokens: 64, system: 'Be brief.',
                                           messages: user('hello') });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.deepEqual(m.content, [{ type: 'text', text: 'echo: hello' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, JSON.stringify(m.usage));
});

test('a streamed message arrives as text deltas and assembles', async () => {
  const stream = claude.messages.stream({ model: 'claude-sonnet-4', max_tokens: 64, messages: user('stream me please') });
  let deltas = 0;
  stream.on('text', () => deltas++);
  const m = await stream.finalMessage();
  assert.deepEqual(m.content, [{ type: 'text', text: 'echo: stream me please' }]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.ok(deltas >= 4, `expected one delta per token, got ${deltas}`);
  assert.ok(m.usage.output_tokens > 0, JSON.stringify(m.usage));
});

test('tool use, then the tool result', async () => {
  const tools = [{ name: 'bash', description: 'run a command', input_schema: { type: 'object', properties: {} } }];
  const messages = user('list files');
  const m = await claude.messages.create({ model: 'claude-sonnet-4', max_tokens: 64, tools, messages });
  assert.equal(m.stop_reason, 'tool_use');
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'bash');
  assert.deepEqual(Object.keys(use.input), ['step']);
  messages.push({ role: 'assistant', content: m.content },
                { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'a.txt' }] });
  const m2 = await claude.messages.create({ model: 'claude-sonnet-4', max_tokens: 64, tools, messages });
  assert.deepEqual(m2.content, [{ type: 'text', text: 'echo: list files' }]);
});

test('streamed tool input assembles from input_json_delta', async () => {
  const tools = [{ name: 'python', input_schema: { type: 'object' } }];
  const m = await claude.messages.stream({ model: 'claude-sonnet-4', max_tokens: 64, tools,
                                           messages: user('compute') }).finalMessage();
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'python');
  assert.ok(use.input.step > 0, JSON.stringify(m.content));
  assert.equal(m.stop_reason, 'tool_use');
});

test('the env token as a bearer auth token works too', async () => {
  const bearer = new Anthropic({ authToken: process.env.CORRAL_TOKEN, apiKey: null, baseURL, maxRetries: 0 });
  const m = await bearer.messages.create({ model: 'm', max_tokens: 16, messages: user('hi') });
  assert.equal(m.content[0].text, 'echo: hi');
});

test('a forged key is an AuthenticationError (401)', async () => {
  await assert.rejects(client('ep-x.forged').messages.create({ model: 'm', max_tokens: 8, messages: user('x') }),
                       (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
});

test('a closed session is an APIError with status 410', async () => {
  await assert.rejects(
    client(process.env.CORRAL_CLOSED_TOKEN).messages.create({ model: 'm', max_tokens: 8, messages: user('x') }),
    (e) => e instanceof Anthropic.APIError && e.status === 410 && e.error?.error?.type === 'invalid_request_error');
});

test('a server tool the upstream cannot run is left out, not refused', async () => {
  const m = await claude.messages.create({ model: 'claude-sonnet-4', max_tokens: 16, messages: user('x'),
                                           tools: [{ type: 'web_search_20250305', name: 'web_search' }] });
  assert.equal(m.type, 'message');
});

test('count_tokens answers an estimate of the input tokens', async () => {
  const n = await claude.messages.countTokens({ model: 'claude-sonnet-4', messages: user('count these few words please') });
  assert.ok(n.input_tokens > 0 && n.input_tokens < 50, JSON.stringify(n));
});
