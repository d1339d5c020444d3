import { once } from 'node:events'
import { readFileSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { run as keysCli } from '../../cli/keys.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { writeTenants } from '../helper.js'
import { post, refusedStart, startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

/** The tenants file with two problems that are the file's, not one tenant's. */
function twoProblems (text: string): TenantsFile {
  const file = JSON.parse(text) as TenantsFile
  file.tiers.standard!.allowance = -1
  file.tenants[1]!.id = 'acme'
  return file
}

/** A log line of the service, as far as these tests read it. */
interface LogLine { msg?: string, trigger?: string, reqId?: string, req?: { url?: string } }

/** The complete lines of the log (a line still being written is left for the next read). */
function logLines (output: string): LogLine[] {
  return output.split('\n').slice(0, -1).filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as LogLine)
}

/**
 * A JSON POST sent but for the last byte of its body, so that the service has received it
 * and holds it open until `finish`.
 */
function heldPost (base: string, path: string, key: string, body: unknown): { finish: () => void, status: Promise<number> } {
  const payload = Buffer.from(JSON.stringify(body))
  const request = httpRequest(base + path, { method: 'POST', agent: false, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': payload.length } })
  const status = new Promise<number>((resolve, reject) => {
    request.on('response', (response) => {
      response.resume()
      response.on('end', () => { resolve(response.statusCode ?? 0) })
    })
    request.on('error', reject)
  })
  request.write(payload.subarray(0, -1))
  return { finish: () => { request.end(payload.subarray(-1)) }, status }
}

const TWO_PROBLEMS = ['/tiers/standard/allowance Expected integer to be greater or equal to 0', '/tenants/1/id appears twice (first at /tenants/0/id)']

t.test('a real process: serve, SIGHUP reload (valid and invalid), keys CLI, SIGTERM', async (t) => {
  const { path, keys } = writeTenants(t)
  // Long enough to hold requests open across the reload on a busy machine.
  const server = await startServer(t, { TENANTS_FILE: path, REQUEST_TIMEOUT_MS: '5m' })

  const sent = await post(server.base, '/otp/request', keys.acmeLive, { email: 'jo@example.com' })
  t.equal(sent.status, 200)
  await server.waitFor(/To: jo@example\.com/)
  const code = /is (\d{6})\./.exec(server.output())?.[1] ?? ''
  t.equal((await post(server.base, '/otp/verify', keys.acmeLive, { requestId: sent.body.data.requestId, userGuess: code })).status, 200, 'the code printed by the log mailer verifies')

  let minted = ''
  let mark = server.output().length
  await keysCli(['create', '--tenant', 'acme', '--kind', 'secret', '--mode', 'live', '--file', path], { out: (line) => { minted = line }, note: () => {}, env: {} })
  t.match(minted, /^sk_live_[0-9A-Za-z]{43}$/, 'the CLI prints the key')
  await server.waitFor(/"trigger":"watch","msg":"tenants file reloaded"/, mark)
  t.equal((await post(server.base, '/otp/request', minted, { email: 'jo@example.com' })).status, 200, 'the changed file is picked up without a signal')

  // Requests in flight across the reload: received (headers, and the body but its last byte)
  // before the signal, answered after the reload. The server's own log orders the events.
  const reloadFrom = server.output().length
  const during = Array.from({ length: 10 }, () => heldPost(server.base, '/otp/verify', keys.acmeLive, { requestId: 'otp_none', userGuess: '000000' }))
  const events = (): LogLine[] => logLines(server.output().slice(reloadFrom))
  const receivedVerifies = (): LogLine[] => events().filter((line) => line.msg === 'incoming request' && line.req?.url === '/otp/verify')
  await until('the service received every request', () => receivedVerifies().length === during.length)
  server.child.kill('SIGHUP')
  await server.waitFor(/"trigger":"signal","msg":"tenants file reloaded"/, reloadFrom)
  for (const request of during) request.finish()
  const statuses = await Promise.all(during.map(async (request) => await request.status))
  t.same(statuses, during.map(() => 400), 'no request was dropped or refused during the reload')
  const verifies = new Set(receivedVerifies().map((line) => line.reqId))
  t.equal(verifies.size, during.length, 'each request was received once')
  const indices = (lines: LogLine[], msg: string): number[] => lines.flatMap((line, index) => line.msg === msg && verifies.has(line.reqId) ? [index] : [])
  // The log line of a completed request may follow its answer by a moment.
  await until('every request\'s completion logged', () => indices(events(), 'request completed').length === during.length)
  const lines = events()
  const reloadedAt = lines.findIndex((line) => line.msg === 'tenants file reloaded' && line.trigger === 'signal')
  t.ok(indices(lines, 'incoming request').every((index) => index < reloadedAt), 'every one was received before the reload')
  t.ok(indices(lines, 'request completed').every((index) => index > reloadedAt), 'and completed after it')
  t.equal((await post(server.base, '/otp/request', minted, { email: 'jo@example.com' })).status, 200, 'the minted key still authenticates after SIGHUP')

  const validFile = readFileSync(path, 'utf8')
  writeFileSync(path, '{ "tiers": ')
  mark = server.output().length
  await server.waitFor(/"trigger":"watch","msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  server.child.kill('SIGHUP')
  await server.waitFor(/"trigger":"signal","msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  t.match(server.output().slice(mark), /not valid JSON: the text ends before the JSON does at line 1, column 12 \(in \/tiers\)/, 'the log says why and where')

  writeFileSync(path, JSON.stringify(twoProblems(validFile)))
  mark = server.output().length
  server.child.kill('SIGHUP')
  await server.waitFor(/"trigger":"signal","msg":"tenants file reload failed; keeping the previous tenants"/, mark)
  const failure = server.output().slice(mark).split('\n').map((line) => line.startsWith('{') ? JSON.parse(line) as { msg: string, problems?: string[] } : null).find((line) => line?.msg.startsWith('tenants file reload failed'))
  t.same(failure?.problems, TWO_PROBLEMS, 'the log lists every problem of the file')
  t.equal((await post(server.base, '/otp/request', minted, { email: 'jo@example.com' })).status, 200, 'the previous tenants stay in force')

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  const [exitCode] = await exited
  t.equal(exitCode, 0, 'SIGTERM exits cleanly')
})

t.test('a configuration error stops start-up with one line', async (t) => {
  const { exitCode, stderr } = await refusedStart({ OTP_TTL_SECONDS: 'soon' })
  t.equal(exitCode, 1)
  t.equal(stderr.trim(), 'email-otp: Invalid configuration: OTP_TTL_SECONDS must be a duration from 1s to 1d, such as 500ms, 30s, 15m, 24h or 30d (a plain number is seconds) (got "soon")')
})

t.test('a bad tenants file stops start-up with one line naming the problem', async (t) => {
  const { path } = writeTenants(t, (file) => { file.tenants[1]!.id = 'acme' })
  const { exitCode, stderr } = await refusedStart({ TENANTS_FILE: path, PORT: '0' })
  t.equal(exitCode, 1)
  t.equal(stderr.trim(), 'email-otp: tenants file: /tenants/1/id appears twice (first at /tenants/0/id)')
})

t.test('a tenants file with several problems stops start-up listing each, one a line', async (t) => {
  const { path } = writeTenants(t)
  writeFileSync(path, JSON.stringify(twoProblems(readFileSync(path, 'utf8'))))
  const { exitCode, stderr } = await refusedStart({ TENANTS_FILE: path, PORT: '0' })
  t.equal(exitCode, 1)
  t.equal(stderr, `email-otp: tenants file: 2 problems:\n${TWO_PROBLEMS.map((problem) => `  ${problem}\n`).join('')}`)
})
