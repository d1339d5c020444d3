import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import { linkSync, readFileSync, renameSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { writeTenants } from '../helper.js'
import { post, startServer } from '../support/service-process.js'

t.test('a real process: SIGHUP loads changed templates, and keeps the tenant\'s last good ones when a template is refused', async (t) => {
  t.testdir({ templates: { acme: { mail: { 'en.txt.liquid': 'First wording: {{ code }}\n' } } } })
  const template = join(t.testdirName, 'templates', 'acme', 'mail', 'en.txt.liquid')
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
    await server.waitFor(/"tenant":"acme","pointers":\["\/tenants\/0\/templates\/en\/text"\].*it keeps its last good configuration/, mark)
    t.match(server.output().slice(mark), reason, 'the log names tenant, locale, part and rule')
    t.equal(await textOfNextMessage(), 'Second wording: CODE\n', 'the last good template stays in force')
  }

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  t.equal((await exited)[0], 0)
})

t.test('a real process: no template of one tenant shows another tenant\'s configuration, in a preview or a mail', async (t) => {
  const secrets = {
    webhook: `whsec_${randomBytes(32).toString('base64')}`,
    captcha: `globex-captcha-${randomBytes(12).toString('hex')}`,
    addressHashKey: randomBytes(32).toString('base64')
  }
  t.testdir({
    'signing.key': `{{ code }} ${secrets.captcha}`,
    templates: { acme: { 'en.txt.liquid': 'Acme says: {{ code }}\n' } }
  })
  const root = t.testdirName
  const acmeFolder = join(root, 'templates', 'acme')
  let text: unknown = { file: 'en.txt.liquid' }
  const { path, keys, file } = writeTenants(t, (file) => {
    file.tenants[0]!.templates = { en: { text: text as string } }
    Object.assign(file.tenants[1]!, {
      addressHashKey: secrets.addressHashKey,
      webhooks: [{ url: 'https://hooks.globex.example/otp', secret: secrets.webhook, events: ['verification.succeeded'] }],
      captcha: { provider: 'turnstile', secret: secrets.captcha }
    })
  })
  const tenantsText = readFileSync(path, 'utf8')
  const server = await startServer(t, { TENANTS_FILE: path })

  /** Everything acme's users and acme itself can see: a preview and a sandbox mail. */
  let sent = 0
  const acmeSees = async (): Promise<string> => {
    const preview = await post(server.base, '/templates/preview', keys.acmeLive, { locale: 'en' })
    t.equal(preview.status, 200)
    const email = `seen${++sent}@example.com`
    t.equal((await post(server.base, '/otp/request', keys.acmeTest, { email })).status, 200)
    const inbox = await fetch(`${server.base}/sandbox/messages?email=${email}`, { headers: { authorization: `Bearer ${keys.acmeTest}` } })
    return JSON.stringify([preview.body, await inbox.json()])
  }
  const assertNothingLeaks = (seen: string, what: string): void => {
    for (const [name, secret] of Object.entries(secrets)) t.notOk(seen.includes(secret), `${what}: no ${name} of globex`)
    for (const entry of [...file.tenants[0]!.keys, ...file.tenants[1]!.keys]) t.notOk(seen.includes(entry.sha256), `${what}: no key hash`)
    t.notOk(seen.includes('"tiers"') || seen.includes(tenantsText.slice(0, 40)), `${what}: nothing of the tenants file`)
  }
  const good = await acmeSees()
  t.match(good, 'Acme says: 123456', 'the tenant\'s own template')
  assertNothingLeaks(good, 'the good template')

  symlinkSync(path, join(acmeFolder, 'link.liquid'))
  linkSync(path, join(acmeFolder, 'hard.liquid'))
  symlinkSync(root, join(acmeFolder, 'up'))
  const attempts: Array<[string, unknown, RegExp]> = [
    ['the tenants file by name', { file: 'tenants.json' }, /file "tenants.json" names the tenants file/],
    ['the tenants file by ..', { file: '../../tenants.json' }, /file "..\/..\/tenants.json" leaves the tenant's template folder/],
    ['the tenants file by an absolute path', { file: path }, /must be a path inside the tenant's template folder .*, not an absolute path/],
    ['a symbolic link to the tenants file', { file: 'link.liquid' }, /file "link.liquid" is a symbolic link/],
    ['a hard link to the tenants file', { file: 'hard.liquid' }, /file "hard.liquid" has 2 hard links/],
    ['a folder on the way that links out', { file: 'up/tenants.json' }, /folder "up" of the tenant's template folder .* is a symbolic link/],
    ['a secret beside the tenants file', { file: 'signing.key' }, /file "signing.key" is not in the tenant's template folder .*: template files are no longer read beside the tenants file; move /],
    ['the include tag', '{{ code }}{% include "../../tenants.json" %}', /the include tag is not available/],
    ['the render tag inside the liquid tag', '{{ code }}{% liquid render "tenants.json" %}', /the render tag is not available/],
    ['the layout tag', '{% layout "tenants.json" %}{{ code }}', /the layout tag is not available/]
  ]
  const reload = async (): Promise<string> => {
    writeFileSync(path, JSON.stringify({ ...file, tenants: [{ ...file.tenants[0], templates: { en: { text } } }, file.tenants[1]] }))
    const mark = server.output().length
    server.child.kill('SIGHUP')
    await server.waitFor(/tenants file reload(ed| failed)/, mark)
    if (/"msg":"tenants file reloaded"/.test(server.output().slice(mark))) await server.waitFor(/tenant refused|"refused":0/, mark)
    // The log lines, with their reasons as written (not JSON-escaped).
    return server.output().slice(mark).split('\n').map((line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string, reason?: string, problems?: string[] }
        return `${entry.msg ?? ''} ${entry.reason ?? ''} ${(entry.problems ?? []).join(' ')}`
      } catch {
        return line
      }
    }).join('\n')
  }
  for (const [what, source, rule] of attempts) {
    text = source
    const log = await reload()
    t.match(log, /tenant refused: its entry in the tenants file breaks a rule; it keeps its last good configuration/, `${what}: refused`)
    t.match(log, rule, `${what}: the log names the rule`)
    const seen = await acmeSees()
    t.match(seen, 'Acme says: ', `${what}: the last good template stays in force`)
    assertNothingLeaks(seen, what)
  }

  // The tenant's own folder replaced by a link to the tenants file's folder.
  renameSync(acmeFolder, join(root, 'templates', 'acme-moved'))
  symlinkSync(root, acmeFolder)
  text = { file: 'tenants.json' }
  const log = await reload()
  t.match(log, /the tenant's template folder .*acme is a symbolic link/, 'a symbolic link as the tenant\'s folder: refused')
  assertNothingLeaks(await acmeSees(), 'a linked tenant folder')

  const exited = once(server.child, 'exit')
  server.child.kill('SIGTERM')
  t.equal((await exited)[0], 0)
})
