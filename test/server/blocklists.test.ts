import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { send } from '../support/http.js'
import { startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

t.test('a real process whose block list file is missing at start: runs, not ready, ready once the file appears', async (t) => {
  const dir = t.testdir({})
  const list = join(dir, 'hosting.txt')
  const server = await startServer(t, { IP_BLOCKLISTS: list })
  const port = Number(new URL(server.base).port)
  t.match(server.output(), /block list could not be loaded; not ready until it is, retrying/, 'the log says why')
  t.equal((await send({ port, method: 'GET', path: '/readyz' })).status, 503, 'not ready')
  t.equal(server.child.exitCode, null, 'and still running')

  writeFileSync(list, '127.0.0.2\n')
  await until('the list to load on a retry', async () => (await send({ port, method: 'GET', path: '/readyz' })).status === 200)
  // The log line goes through the process's stdout pipe, which can arrive after the answer.
  await until('the load to be logged', async () => /block list loaded/.test(server.output()))
  t.equal((await send({ port, localAddress: '127.0.0.2', path: '/otp/request', headers: { 'content-type': 'application/json' }, body: '{}' })).status, 403, 'the list is in force')
})
