import { Agent, request } from 'node:http'
import t from 'tap'
import { buildApp } from '../helper.js'
import { listenApp } from '../support/http.js'

async function keepAliveHeader (port: number): Promise<string | undefined> {
  const agent = new Agent({ keepAlive: true })
  try {
    return await new Promise((resolve, reject) => {
      request({ host: '127.0.0.1', port, path: '/healthz', agent }, (response) => {
        response.resume()
        response.on('end', () => { resolve(response.headers['keep-alive'] as string | undefined) })
      }).on('error', reject).end()
    })
  } finally {
    agent.destroy()
  }
}

t.test('KEEP_ALIVE_TIMEOUT_MS: 72 s by default, up to past Envoy\'s one-hour idle timeout, announced to the client', async (t) => {
  const byDefault = await buildApp(t)
  t.equal(byDefault.app.config.keepAliveTimeoutMs, 72_000)
  t.equal(await keepAliveHeader(await listenApp(byDefault.app)), 'timeout=72', 'the answer tells a client or proxy when an idle connection closes')
  const longer = await buildApp(t, { KEEP_ALIVE_TIMEOUT_MS: '3700000' })
  t.equal(await keepAliveHeader(await listenApp(longer.app)), 'timeout=3700', 'longer than Envoy\'s default, for a mesh whose idle timeout cannot be lowered')
})
