import t from 'tap'
import { execFile, spawnSync } from 'node:child_process'
import type { AddressInfo } from 'node:net'
import { promisify } from 'node:util'
import { buildApp } from '../helper.js'

const browser = 'chromium'
const browserAvailable = spawnSync(browser, ['--version'], { stdio: 'ignore' }).status === 0
if (!browserAvailable) {
  process.stderr.write(`\n!!  ${browser} not found: the /docs browser test is SKIPPED (apt-get install -y chromium to run it).\n\n`)
}

t.test('/docs renders in a real browser over plain HTTP on a host that is not loopback', { skip: browserAvailable ? false : `${browser} is not installed` }, async (t) => {
  const { app } = await buildApp(t)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  // The browser believes it talks to docs.example.test (not a potentially trustworthy origin,
  // unlike localhost); the name resolves to the loopback address, so no traffic leaves.
  const { stdout } = await promisify(execFile)(browser, [
    '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    `--user-data-dir=${t.testdir({})}`,
    '--host-resolver-rules=MAP docs.example.test 127.0.0.1',
    '--virtual-time-budget=10000',
    '--dump-dom',
    `http://docs.example.test:${port}/docs/`
  ], { timeout: 90_000, maxBuffer: 32 * 1024 * 1024 })
  // The served page holds an empty <div id="swagger-ui">: these appear only once its scripts
  // ran and it loaded the document.
  t.match(stdout, /opblock-summary-path[^>]*>[\s\S]{0,200}\/otp\/request/, 'the UI listed the operations')
  t.match(stdout, /email-otp/, 'the UI shows the document\'s title')
})
