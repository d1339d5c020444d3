import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { writeTenants } from '../helper.js'
import { post, serverArgs, startServer } from '../support/service-process.js'

t.test('a real process: SIGHUP loads changed templates, and keeps the last good ones when a template is refused', async (t) => {
  t.testdir({ mail: { 'en.txt.liquid': 'First wording: {{ code }}\n' } })
  const template = join(t.testdirName, 'mail', 'en.txt.liquid')
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.templates = { en: { subject: 'Sign in to {{ brand }}', text: { file: 'mail/en.txt.liquid' } } }
  })
  const server = await startServer(t, { TENANTS_FILE: path })
  let sent = 0
  const textOfNextMessage = async (): Promise<string> => {
    const email = `user${++sent}@example.com`
    t.equal((await post(server.base, '/otp/request', keys.acmeTest, { email })).status, 200)
    const inbox = await fetch(`${server.base}/sandbox/messages?email=${email}`, { headers: { authorization: `Bearer ${keys.acmeTest}` } })
    const [message] = ((await inbox.json()) as { data: { messages: Array<{ text: string, code: string }> } }).data.messages
    return message?.text.replace(message.code, 'CODE') ?? ''
  }
  t.equal(await textOfNextMessage(), 'First wording: CODE\n')

  writeFileSync(template, 'Second wording: {{ code }}\n')
  let mark = server.output().length
  server.child.kill('SIGHUP')
  await server.waitFor(/tenants file reloaded/, mark)
  t.equal(await textOfNextMessage(), 'Second wording: CODE\n', 'a changed template file is read again on SIGHUP')

  const refused: Array<[string, RegExp]> = [
    ['Third wording, without the code\n', /\/tenants\/0\/templates\/en\/text \(tenant acme, locale en, text\): the template must contain the code/],
    ['{{ code }}{% for i in (1..100000000) %}.{% endfor %}', /\(tenant acme, locale en, text\): the template does not render: the render allocates more than the limit/],
    ['{{ code }}{% include "../../tenants.json" %}', /\(tenant acme, locale en, text\): the template does not parse: the include tag is not available/]
  ]
  for (const [source, reason] of refused) {
    writeFileSync(template, source)
    mark = server.output().length
    server.child.kill('SIGHUP')
    await server.waitFor(/tenants file reload failed; keeping the previous tenants/, mark)
    t.match(server.output().slice(mark), reason, 'the log names tenant, locale, part and rule')
    t.equal(await textOfNextMessage(), 'Second wording: CODE\n', 'the last good template stays in force')
  }

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  t.equal((await exited)[0], 0)
})

t.test('a refused template stops start-up with one line naming it', async (t) => {
  const { path } = writeTenants(t, (file) => { file.tenants[1]!.templates = { fr: { subject: 'Votre code : {{ code }}' } } })
  const child = spawn(process.execPath, serverArgs, {
    env: { PATH: process.env.PATH ?? '', TENANTS_FILE: path, PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const [exitCode] = await once(child, 'exit')
  t.equal(exitCode, 1)
  t.equal(stderr.trim(), 'email-otp: tenants file: a template is refused: /tenants/1/templates/fr/subject (tenant globex, locale fr, subject): the subject must not contain the code: subjects show in notifications and mailbox lists')
})
