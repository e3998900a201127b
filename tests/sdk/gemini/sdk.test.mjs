// The official @google/genai npm package (the client Gemini CLI is built on) against corral-proxy's Gemini API,
// started (with corral-fake-llm, which speaks only chat completions, behind it) by
// tests/integration/proxy_sdk_test.cc, which passes the base URL and session tokens in the environment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GoogleGenAI, ApiError } from '@google/genai';

const baseUrl = process.env.CORRAL_GEMINI_BASE_URL;
const client = (apiKey) => new GoogleGenAI({ apiKey, httpOptions: { baseUrl, timeout: 20000 } });
const gemini = client(process.env.CORRAL_TOKEN);  // the env token as x-goog-api-key, as Gemini CLI sends it
const model = 'gemini-2.5-pro';
const user = (text) => [{ role: 'user', parts: [{ text }] }];
const shell = [{ functionDeclarations: [{
  name: 'run_shell_command', description: 'run a command',
  parameters: { type: 'OBJECT', properties: { step: { type: 'INTEGER' } } } }] }];

test('generateContent', async () => {
  const r = await gemini.models.generateContent({ model, contents: 'hello',
    config: { systemInstruction: 'Be brief.', temperature: 0.2, maxOutputTokens: 64 } });
  assert.equal(r.text, 'echo: hello');
  assert.equal(r.candidates[0].finishReason, 'STOP');
  assert.equal(r.candidates[0].content.role, 'model');
  const u = r.usageMetadata;
  assert.ok(u.promptTokenCount > 0 && u.candidatesTokenCount > 0, JSON.stringify(u));
  assert.equal(u.totalTokenCount, u.promptTokenCount + u.candidatesTokenCount);
});

test('generateContentStream arrives piece by piece and assembles', async () => {
  const stream = await gemini.models.generateContentStream({ model, contents: user('stream me please') });
  const pieces = [];
  let last;
  for await (const chunk of stream) {
    pieces.push(chunk.text ?? '');
    last = chunk;
  }
  assert.equal(pieces.join(''), 'echo: stream me please');
  assert.ok(pieces.length >= 4, `expected one chunk per token, got ${pieces.length}`);
  assert.equal(last.candidates[0].finishReason, 'STOP');
  assert.ok(last.usageMetadata.candidatesTokenCount > 0, JSON.stringify(last.usageMetadata));
});

test('a function call, then its response', async () => {
  const contents = user('list files');
  const r = await gemini.models.generateContent({ model, contents, config: { tools: shell } });
  assert.equal(r.functionCalls.length, 1);
  const call = r.functionCalls[0];
  assert.equal(call.name, 'run_shell_command');
  assert.ok(call.args.step > 0, JSON.stringify(call));
  assert.ok(call.id, 'the call carries the id the proxy links its response by');
  contents.push(r.candidates[0].content,
                { role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name,
                                                              response: { output: 'a.txt' } } }] });
  const r2 = await gemini.models.generateContent({ model, contents, config: { tools: shell } });
  assert.equal(r2.text, 'echo: list files');
  assert.equal(r2.functionCalls, undefined);
});

test('a streamed function call arrives whole', async () => {
  const stream = await gemini.models.generateContentStream({ model, contents: user('compute'),
    config: { tools: shell, toolConfig: { functionCallingConfig: { mode: 'ANY' } } } });
  const calls = [];
  for await (const chunk of stream) calls.push(...(chunk.functionCalls ?? []));
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'run_shell_command');
  assert.ok(calls[0].args.step > 0, JSON.stringify(calls[0]));
});

test('countTokens is an estimate', async () => {
  const r = await gemini.models.countTokens({ model, contents: 'hello world, twelve!' });
  assert.ok(r.totalTokens >= 5 && r.totalTokens <= 20, JSON.stringify(r));
});

test('the models list', async () => {
  const pager = await gemini.models.list();
  const names = [];
  for await (const m of pager) names.push(m.name);
  assert.ok(names.includes('models/fake-model'), JSON.stringify(names));
});

test('a built-in tool the upstream cannot run is left out, not refused', async () => {
  const r = await gemini.models.generateContent({ model, contents: 'x', config: { tools: [{ googleSearch: {} }] } });
  assert.equal(r.text, 'echo: x');
});

test('a forged key is an ApiError with status 401', async () => {
  await assert.rejects(client('ep-x.forged').models.generateContent({ model, contents: 'x' }),
                       (e) => e instanceof ApiError && e.status === 401 && /UNAUTHENTICATED/.test(e.message));
});

test('a closed session is an ApiError with status 410, streamed or not', async () => {
  const closed = client(process.env.CORRAL_CLOSED_TOKEN);
  await assert.rejects(closed.models.generateContent({ model, contents: 'x' }),
                       (e) => e instanceof ApiError && e.status === 410 && /session/.test(e.message));
  await assert.rejects(closed.models.generateContentStream({ model, contents: 'x' }),
                       (e) => e instanceof ApiError && e.status === 410);
});
