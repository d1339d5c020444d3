import { linkSync, mkdirSync, realpathSync, renameSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs'
import { createRequire, syncBuiltinESMExports } from 'node:module'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { composeVerificationMessage, renderVerificationParts } from '../../../../lib/mail/templating/message.js'
import { FILE_TAGS, NO_FILES, OUTPUT_LIMITS, PARTS, engineFor } from '../../../../lib/mail/templating/liquid.js'
import { MEMORY_LIMIT } from '../../../../lib/mail/templating/liquid-bounds.js'
import { negotiateLocale } from '../../../../lib/mail/templating/locale.js'
import { TemplateFolders, templatesRootProblem, type TenantTemplateFolder } from '../../../../lib/mail/templating/template-files.js'
import { TemplatesError, TenantTemplates, type TemplatesEntry, type TemplateSource } from '../../../../lib/mail/templating/tenant-templates.js'
import { registryFromFile, registryFromJson } from '../../../../lib/tenants-file/load.js'

const CODE = '482910'

function load (entry: TemplatesEntry, folder: TenantTemplateFolder | null = null, brand = 'Acme'): TenantTemplates {
  return TenantTemplates.load(entry, { folder, brand })
}

/** The one rule a single template breaks, as the load reports it. */
function refusal (t: Test, source: TemplateSource, part: 'subject' | 'text' | 'html' = 'text', entry: Omit<TemplatesEntry, 'templates'> = {}, folder: TenantTemplateFolder | null = null): string {
  try {
    load({ ...entry, templates: { en: { [part]: source } } }, folder)
  } catch (error) {
    t.type(error, TemplatesError)
    const { problems } = error as TemplatesError
    t.equal(problems.length, 1, 'one problem')
    t.same({ locale: problems[0]?.locale, part: problems[0]?.part }, { locale: 'en', part }, 'names the locale and the part')
    return problems[0]?.rule ?? ''
  }
  t.fail('the template was accepted')
  return ''
}

function compose (templates: TenantTemplates, locale: string, overrides: Partial<Parameters<typeof composeVerificationMessage>[0]> = {}): ReturnType<typeof composeVerificationMessage> {
  return composeVerificationMessage({
    to: 'person@example.com', from: 'codes@acme.test', brand: 'Acme', code: CODE, ttlSeconds: 600, locale, tags: {}, templates, ...overrides
  })
}

t.test('a tenant\'s own parts replace the built-in ones, language by language', async (t) => {
  const templates = load({
    constants: { support: 'https://help.acme.test', legal: 'Acme SA, 1 rue de la Paix' },
    defaultLocale: 'fr',
    templates: {
      fr: {
        subject: 'Connexion à {{ brand }}',
        text: 'Bonjour,\n\nVotre code : {{ code }} ({{ minutes }} min).\n{{ constants.legal }}\n',
        html: '<html lang="{{ locale }}"><p>Code&nbsp;: <b>{{ code }}</b></p><p>{{ minutes }} {% if minutes == 1 %}minute{% else %}minutes{% endif %}</p><a href="{{ constants.support }}">Aide</a></html>'
      },
      en: { html: '<p>Your code: {{ code }}</p><small>{{ constants.legal }}</small>' }
    }
  })
  t.same(templates.locales, ['fr', 'en', 'de', 'es'], 'the default first, then the built-in languages')
  t.same(templates.customParts('fr'), ['subject', 'text', 'html'])
  t.same(templates.customParts('en'), ['html'])
  t.same(templates.customParts('de'), [])

  const french = compose(templates, 'fr')
  t.equal(french.subject, 'Connexion à Acme')
  t.equal(french.text, `Bonjour,\n\nVotre code : ${CODE} (10 min).\nAcme SA, 1 rue de la Paix\n`)
  t.equal(french.html, `<html lang="fr"><p>Code&nbsp;: <b>${CODE}</b></p><p>10 minutes</p><a href="https://help.acme.test">Aide</a></html>`)
  t.match(compose(templates, 'fr', { ttlSeconds: 60 }).html, '<p>1 minute</p>', 'branches on the lifetime')

  const english = compose(templates, 'en')
  t.equal(english.subject, 'Your Acme verification code', 'a part the tenant did not write is the built-in one')
  t.match(english.text, `Your Acme verification code is ${CODE}.`)
  t.equal(english.html, `<p>Your code: ${CODE}</p><small>Acme SA, 1 rue de la Paix</small>`)

  const german = compose(templates, 'de')
  t.equal(german.subject, 'Ihr Bestätigungscode für Acme', 'a language the tenant did not write is all built in')
  t.match(german.html, '<html lang="de">')
})

t.test('every dispatch gets its own code; the request time is UTC, to the minute, in the message\'s language', async (t) => {
  const templates = load({
    templates: {
      fr: { text: '{{ code }} demandé le {{ requestedAt | date: "%-d %B %Y à %H:%M" }} ({{ requestedAt }})' },
      de: { text: '{{ code }} am {{ requestedAt | date: "%-d. %B %Y" }}' }
    }
  })
  const at = new Date('2026-03-09T23:59:58.123Z')
  const first = renderVerificationParts({ templates, locale: 'fr', brand: 'Acme', code: '111111', ttlSeconds: 600, requestedAt: at })
  const second = renderVerificationParts({ templates, locale: 'fr', brand: 'Acme', code: '222222', ttlSeconds: 600, requestedAt: at })
  t.equal(first.text, '111111 demandé le 9 mars 2026 à 23:59 (2026-03-09T23:59Z)')
  t.equal(second.text, '222222 demandé le 9 mars 2026 à 23:59 (2026-03-09T23:59Z)', 'the same minute, another code')
  const later = renderVerificationParts({ templates, locale: 'fr', brand: 'Acme', code: '333333', ttlSeconds: 600, requestedAt: new Date('2026-03-10T00:00:01Z') })
  t.equal(later.text, '333333 demandé le 10 mars 2026 à 00:00 (2026-03-10T00:00Z)', 'a new minute renders anew')
  t.equal(renderVerificationParts({ templates, locale: 'de', brand: 'Acme', code: '444444', ttlSeconds: 600, requestedAt: at }).text, '444444 am 9. März 2026')
})

t.test('brand and constants are escaped in HTML and kept as written in the text part', async (t) => {
  const hostile = '<script>alert("x")</script> & \'q\''
  const templates = load({
    constants: { footer: hostile, link: '" onmouseover="alert(1)' },
    templates: { en: { html: '<p>{{ brand }} {{ code }}</p><p>{{ constants.footer }}</p><a title="{{ constants.link }}">x</a>', text: '{{ brand }} {{ code }} {{ constants.footer }}' } }
  }, null, hostile)
  const message = compose(templates, 'en', { brand: hostile })
  t.notMatch(message.html, /<script/, 'no script element')
  t.notMatch(message.html, /" onmouseover/, 'no way out of an attribute')
  t.equal(message.html, `<p>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39; ${CODE}</p><p>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;q&#39;</p><a title="&#34; onmouseover=&#34;alert(1)">x</a>`)
  t.equal(message.text, `${hostile} ${CODE} ${hostile}`, 'the text part is not markup')
  t.match(refusal(t, '{{ code }}{{ constants.footer | raw }}', 'html', { constants: { footer: 'x' } }), /the raw filter is not available/, 'no way to print a value unescaped')
})

t.test('the subject is one line, whatever the template, brand or constants hold', async (t) => {
  const templates = load({ templates: { en: { subject: 'Sign in\r\nBcc: attacker@evil.test\n\n{{ brand }}\u2028{{ brand }}' } } })
  const message = compose(templates, 'en', { brand: 'Acme\r\nX-Injected: 1' })
  t.equal(message.subject, 'Sign in Bcc: attacker@evil.test Acme X-Injected: 1 Acme X-Injected: 1')
  t.notMatch(message.subject, /[\r\n\u2028]/)
  t.match(refusal(t, '{% if minutes == 0 %}x{% endif %}  \n ', 'subject'), /the subject renders empty/)
})

t.test('refused at load, each with the rule it breaks', async (t) => {
  const cases: Array<[string, TemplateSource, 'subject' | 'text' | 'html', RegExp]> = [
    ['no code', 'Your code is on its way.', 'text', /must contain the code, written \{\{ code \}\}/],
    ['no code in HTML', '<p>{{ brand }}</p>', 'html', /must contain the code/],
    ['the code in the subject', 'Your code: {{ code }}', 'subject', /the subject must not contain the code/],
    ['the code in the subject, through a filter', '{{ brand }} {{ code | slice: 0, 3 }}', 'subject', /the subject must not contain the code/],
    ['the code in the subject, in a tag', '{% if code %}x{% endif %}', 'subject', /the subject must not contain the code/],
    ['the code twice', '{{ code }} again: {{ code }}', 'text', /exactly once; it has it 2 times/],
    ['the code in a loop', '{% for i in (1..3) %}{{ code }}{% endfor %}', 'html', /exactly once; it has it 3 times/],
    ['the code only on a branch the render does not take', '{% if minutes == 7 %}{{ code }}{% endif %}', 'text', /exactly once; it has it 0 times/],
    ['the code through a filter', '{{ code | slice: 0, 3 }} {{ code | slice: 3, 3 }}', 'text', /the code may only be written \{\{ code \}\}/],
    ['the code in a condition', '{{ code }}{% if code contains "9" %}!{% endif %}', 'text', /the code may only be written/],
    ['the code captured', '{% capture c %}{{ code }}{% endcapture %}{{ c }}', 'html', /the code may only be written/],
    ['the code assigned', '{% assign c = code %}{{ c }}', 'text', /the code may only be written/],
    ['an infinite loop', '{{ code }}{% for i in (1..100000000) %}x{% endfor %}', 'text', new RegExp(`allocates more than the limit of ${MEMORY_LIMIT.toLocaleString('en')} units`)],
    ['nested loops', '{{ code }}{% for a in (1..1000) %}{% for b in (1..1000) %}{% for c in (1..1000) %}{% endfor %}{% endfor %}{% endfor %}', 'html', /allocates more than the limit|counts more than [\d,]+ units of work/],
    ['a string doubled in a loop', '{{ code }}{% assign s = "xxxxxxxxxx" %}{% for i in (1..30) %}{% assign s = s | append: s %}{% endfor %}{{ s }}', 'text', /the append filter's result is longer than 16,384 characters|counts more than [\d,]+ units of work/],
    ['a huge output', `{{ code }}{% for i in (1..700) %}${'x'.repeat(100)}{% endfor %}`, 'text', new RegExp(`the output is larger than ${OUTPUT_LIMITS.text} characters`)],
    ['a huge subject', `{% for i in (1..30) %}${'y'.repeat(10)}{% endfor %}`, 'subject', new RegExp(`the output is larger than ${OUTPUT_LIMITS.subject} characters`)],
    ['an unknown variable', '{{ code }} {{ brnad }}', 'text', /unknown variable "brnad" \(line 1, column 15\)/],
    ['an unknown variable on a branch never taken', '{{ code }}{% if minutes > 100000 %}{{ requestId }}{% endif %}', 'text', /unknown variable "requestId"/],
    ['the address', '{{ code }} sent to {{ email }}', 'text', /unknown variable "email"/],
    ['an unknown filter', '{{ code }} {{ brand | shout }}', 'text', /does not parse: undefined filter: shout/],
    ['an unknown constant', '{{ code }} {{ constants.legal }}', 'html', /unknown constant "constants.legal".*constants are none/],
    ['the include tag', '{{ code }}{% include "footer.liquid" %}', 'html', /the include tag is not available: a template cannot read other templates or files/],
    ['the render tag', '{{ code }}{% render "footer" %}', 'html', /the render tag is not available/],
    ['the layout tag', '{% layout "base" %}{{ code }}', 'html', /the layout tag is not available/],
    ['the include tag, dynamic', '{{ code }}{% include {{ brand }} %}', 'text', /the include tag is not available/],
    ['the include tag, with variables', '{{ code }}{% include "tenants.json" with brand, a: 1 %}', 'text', /the include tag is not available/],
    ['the render tag, over a collection', '{{ code }}{% render "tenants.json" for constants as c %}', 'html', /the render tag is not available/],
    ['the layout tag, none', '{% layout none %}{{ code }}', 'text', /the layout tag is not available/],
    ['the block tag', '{{ code }}{% block b %}x{% endblock %}', 'text', /the block tag is not available/],
    ['the include tag inside the liquid tag', '{{ code }}{% liquid\n  include "../tenants.json"\n%}', 'text', /the include tag is not available/],
    ['the render tag inside the liquid tag', '{{ code }}{% liquid render "tenants.json" %}', 'html', /the render tag is not available/],
    ['a syntax error', '{{ code }}{% if %}', 'text', /does not parse/],
    ['an unclosed tag', '{{ code }}{% for i in (1..2) %}', 'text', /does not parse/],
    ['a prototype', '{{ code }}{{ brand.constructor }}', 'text', /does not render: undefined variable: brand.constructor/]
  ]
  for (const [what, source, part, rule] of cases) {
    t.match(refusal(t, source, part), rule, what)
  }
})

/**
 * A deployment as the service sees it: the tenants file (with another tenant's secrets in it),
 * a secret beside it, and the template folders under `templates/`, one per tenant.
 */
function deployment (t: Test, acme: Record<string, unknown> = {}): { root: string, tenantsFile: string, folders: TemplateFolders, acme: TenantTemplateFolder } {
  const root = t.testdir({
    'tenants.json': '{"tenants":[{"id":"globex","captcha":{"secret":"globex-captcha-secret"}}]} {{ code }}',
    'signing.key': '{{ code }} secret key material',
    mail: { 'fr.html.liquid': '<p>{{ code }}</p> old layout' },
    templates: {
      acme: { 'en.html.liquid': '<p>{{ code }}</p>', mail: { 'fr.html.liquid': '<p lang="fr">{{ code }}</p>' }, 'big.liquid': 'x'.repeat(5000), ...acme },
      globex: { 'en.html.liquid': '<p>{{ code }} globex</p>' }
    }
  })
  const tenantsFile = join(root, 'tenants.json')
  const folders = new TemplateFolders(join(root, 'templates'), tenantsFile)
  return { root, tenantsFile, folders, acme: folders.forTenant('acme') }
}

t.test('the engines reach no file, whatever a template says', async (t) => {
  for (const locale of ['en', 'fr']) {
    for (const part of PARTS) {
      const { options, tags } = engineFor(locale, part)
      t.equal(options.fs, NO_FILES, `${locale} ${part}: a file system that refuses every call`)
      t.same([options.root, options.partials, options.layouts], [[], [], []], 'no folder to look templates up in')
      t.same([options.relativeReference, options.dynamicPartials], [false, false], 'no relative nor dynamic partials')
      t.same(FILE_TAGS.filter((tag) => Object.hasOwn(tags, tag)), [], 'no file tag')
    }
  }
  t.throws(() => NO_FILES.readFileSync('tenants.json'), /templates cannot read files/)
  t.throws(() => NO_FILES.existsSync('tenants.json'), /templates cannot read files/)
  t.throws(() => NO_FILES.resolve('.', 'tenants.json', ''), /templates cannot read files/)
  await t.rejects(NO_FILES.readFile('tenants.json'), /templates cannot read files/)
  await t.rejects(NO_FILES.exists('tenants.json'), /templates cannot read files/)
  t.equal(NO_FILES.containsSync?.('.', 'tenants.json'), false)
})

t.test('template files: read from the tenant\'s own folder only', async (t) => {
  const { root, acme } = deployment(t)
  const html = (file: string): string => compose(load({ templates: { en: { html: { file } } } }, acme), 'en').html
  t.equal(html('en.html.liquid'), `<p>${CODE}</p>`)
  t.equal(html('mail/fr.html.liquid'), `<p lang="fr">${CODE}</p>`, 'in a folder of the tenant\'s folder')
  t.equal(html('./mail/fr.html.liquid'), `<p lang="fr">${CODE}</p>`)

  const folder = join(root, 'templates', 'acme')
  t.match(refusal(t, { file: 'tenants.json' }, 'html', {}, acme), `file "tenants.json" names the tenants file: a template is read only from the tenant's template folder ${folder}/`, 'the tenants file by name')
  t.match(refusal(t, { file: '../../tenants.json' }, 'html', {}, acme), `file "../../tenants.json" leaves the tenant's template folder ${folder}/: a path may not contain ".."`, 'the tenants file by ..')
  t.match(refusal(t, { file: 'mail/../../globex/en.html.liquid' }, 'html', {}, acme), /leaves the tenant's template folder .*: a path may not contain "\.\."/, 'another tenant\'s folder')
  t.match(refusal(t, { file: join(root, 'tenants.json') }, 'html', {}, acme), `must be a path inside the tenant's template folder ${folder}/, not an absolute path`, 'an absolute path')
  t.match(refusal(t, { file: 'mail/fr.html.liquid.missing' }, 'html', {}, acme), `file "mail/fr.html.liquid.missing" does not exist in the tenant's template folder ${folder}/`)
  t.match(refusal(t, { file: 'mail' }, 'html', {}, acme), /file "mail" is not a regular file/)
  t.match(refusal(t, { file: 'big.liquid' }, 'subject', {}, acme), /file "big.liquid" is larger than 4096 bytes/)
  t.match(refusal(t, { file: 'en.html.liquid' }, 'html', {}, null), /this tenants file was loaded without one/, 'inline templates only without a folder')
})

t.test('template files: an old-layout file is told where it must go now', async (t) => {
  const { root } = deployment(t)
  const rule = refusal(t, { file: 'mail/fr.html.liquid' }, 'html', {}, new TemplateFolders(join(root, 'templates'), join(root, 'tenants.json')).forTenant('initech'))
  t.equal(rule, `file "mail/fr.html.liquid" is not in the tenant's template folder ${join(root, 'templates', 'initech')}/: template files are no longer read beside the tenants file; move ${join(root, 'mail', 'fr.html.liquid')} to ${join(root, 'templates', 'initech', 'mail', 'fr.html.liquid')}`)
})

t.test('template files: no symbolic or hard link leads out of the tenant\'s folder', async (t) => {
  const { root, tenantsFile, folders } = deployment(t)
  const acmeFolder = join(root, 'templates', 'acme')
  symlinkSync(tenantsFile, join(acmeFolder, 'link.liquid'))
  symlinkSync(root, join(acmeFolder, 'up'))
  symlinkSync('../globex', join(acmeFolder, 'neighbour'))
  linkSync(tenantsFile, join(acmeFolder, 'hard.liquid'))
  linkSync(join(root, 'signing.key'), join(acmeFolder, 'key.liquid'))
  const acme = folders.forTenant('acme')
  t.match(refusal(t, { file: 'link.liquid' }, 'html', {}, acme), 'file "link.liquid" is a symbolic link; a template file must be a regular file inside the tenant\'s template folder', 'a symbolic link to the tenants file')
  t.match(refusal(t, { file: 'up/tenants.json' }, 'html', {}, acme), `file "up/tenants.json" cannot be read: folder "up" of the tenant's template folder ${acmeFolder}/ is a symbolic link; template files are read only from real folders`, 'a symbolic link to a folder on the way')
  t.match(refusal(t, { file: 'neighbour/en.html.liquid' }, 'html', {}, acme), /folder "neighbour" .* is a symbolic link/, 'a symbolic link to another tenant\'s folder')
  t.match(refusal(t, { file: 'hard.liquid' }, 'html', {}, acme), 'file "hard.liquid" has 2 hard links; a template file must have exactly one', 'a hard link to the tenants file')
  t.match(refusal(t, { file: 'key.liquid' }, 'html', {}, acme), 'file "key.liquid" has 2 hard links', 'a hard link to a secret')

  // The tenant's folder itself, a symbolic link to the tenants file's folder.
  symlinkSync(root, join(root, 'templates', 'initech'))
  t.match(refusal(t, { file: 'tenants.json' }, 'html', {}, folders.forTenant('initech')), `file "tenants.json" cannot be read: the tenant's template folder ${join(root, 'templates', 'initech')} is a symbolic link`, 'a symbolic link as the tenant\'s folder')

  // The root may be reached through a link (the operator's choice), the tenant's folder not.
  symlinkSync(join(root, 'templates'), join(root, 'templates-link'))
  t.equal(compose(load({ templates: { en: { html: { file: 'en.html.liquid' } } } }, new TemplateFolders(join(root, 'templates-link'), tenantsFile).forTenant('acme')), 'en').html, `<p>${CODE}</p>`)
  t.match(refusal(t, { file: 'en.html.liquid' }, 'html', {}, new TemplateFolders(join(root, 'nowhere'), tenantsFile).forTenant('acme')), `cannot be read: the templates folder ${join(root, 'nowhere')} (TEMPLATES_DIR) does not exist`)
})

t.test('template files: a folder swapped for a link between the checks and the open, and back, is caught', { skip: process.platform === 'win32' }, async (t) => {
  const { root, acme } = deployment(t)
  const mail = join(root, 'templates', 'acme', 'mail')
  const target = join(realpathSync(root), 'templates', 'acme', 'mail', 'fr.html.liquid')
  // The race an attacker with write access to the tenant's folder would run: the walk sees a
  // real folder, the open goes through a link to a file outside, and the folder is back in
  // place before anything looks again. Played at those exact moments through the module's own
  // open (ESM imports of node:fs follow syncBuiltinESMExports), so it does not depend on luck.
  const fs = createRequire(import.meta.url)('node:fs') as typeof import('node:fs')
  const open = fs.openSync
  let swaps = 0
  fs.openSync = (...args: Parameters<typeof open>): number => {
    if (args[0] !== target) return open(...args)
    swaps++
    renameSync(mail, `${mail}.aside`)
    symlinkSync(join(root, 'mail'), mail)
    try {
      return open(...args)
    } finally {
      unlinkSync(mail)
      renameSync(`${mail}.aside`, mail)
    }
  }
  syncBuiltinESMExports()
  t.teardown(() => {
    fs.openSync = open
    syncBuiltinESMExports()
  })
  t.match(refusal(t, { file: 'mail/fr.html.liquid' }, 'html', {}, acme), 'file "mail/fr.html.liquid" is reached through a symbolic link; template files are read only from real folders', 'the file opened is not the one at the path: refused')
  t.equal(swaps, 1, 'the folder was swapped once, between the walk and the open')
})

t.test('template files: a FIFO is refused without waiting for a writer', { skip: process.platform === 'win32' }, async (t) => {
  const { root, folders } = deployment(t)
  const { execFileSync } = await import('node:child_process')
  execFileSync('mkfifo', [join(root, 'templates', 'acme', 'pipe.liquid')])
  t.match(refusal(t, { file: 'pipe.liquid' }, 'html', {}, folders.forTenant('acme')), /file "pipe.liquid" is not a regular file/)
})

t.test('the templates root holds nothing else the service reads', async (t) => {
  const root = t.testdir({ etc: { 'tenants.json': '{}', lists: { 'proxies.txt': '' }, templates: {} }, srv: {} })
  const tenantsFile = join(root, 'etc', 'tenants.json')
  const guarded = { tenantsFile, others: [['IP_BLOCKLISTS', join(root, 'etc', 'lists', 'proxies.txt')] as const] }
  t.equal(templatesRootProblem(join(root, 'etc', 'templates'), guarded), null, 'templates/ beside the tenants file')
  t.equal(templatesRootProblem(join(root, 'srv', 'not-yet'), guarded), null, 'a folder elsewhere, even one not made yet')
  t.equal(templatesRootProblem(join(root, 'etc'), guarded), `${join(root, 'etc')} must not be or contain the tenants file's folder (${join(root, 'etc')}): tenants' template files get a folder of their own`, 'the tenants file\'s folder')
  t.match(templatesRootProblem(root, guarded), /must not be or contain the tenants file's folder/, 'a parent of it')
  t.equal(templatesRootProblem(join(root, 'etc', 'lists'), guarded), `${join(root, 'etc', 'lists')} must not contain ${join(root, 'etc', 'lists', 'proxies.txt')} (IP_BLOCKLISTS): it holds tenants' template files and nothing else`)
  mkdirSync(join(root, 'srv', 'linked'))
  symlinkSync(join(root, 'etc'), join(root, 'srv', 'linked', 'etc'))
  t.match(templatesRootProblem(join(root, 'srv', 'linked', 'etc'), guarded), /must not be or contain the tenants file's folder/, 'through a symbolic link')
  symlinkSync(tenantsFile, join(root, 'srv', 'tenants.json'))
  t.match(templatesRootProblem(join(root, 'srv'), { ...guarded, tenantsFile: join(root, 'srv', 'tenants.json') }), /must not be or contain the tenants file's folder/, 'a tenants file that is a link into it')
})

t.test('a language without built-in wording needs every part; the default must exist', async (t) => {
  const italian = load({ defaultLocale: 'it', templates: { it: { subject: 'Il tuo codice {{ brand }}', text: 'Codice: {{ code }}', html: '<p>{{ code }}</p>' } } })
  t.same(italian.locales, ['it', 'en', 'fr', 'de', 'es'])
  t.equal(compose(italian, 'it').subject, 'Il tuo codice Acme')
  t.equal(italian.negotiate(undefined, undefined), 'it', 'the tenant\'s default when nothing is asked')
  t.equal(italian.negotiate(undefined, 'it-CH, en;q=0.5'), 'it')
  t.equal(italian.negotiate('fr-BE', 'it'), 'fr', 'the body first')
  t.equal(italian.negotiate(undefined, 'ja, *;q=0.1'), 'it', 'a wildcard is the tenant\'s default')

  let error: unknown
  try {
    load({ defaultLocale: 'ja', templates: { it: { text: 'Codice: {{ code }}' }, 'pt-BR': { subject: 'x', text: '{{ code }}', html: '{{ code }}' } } })
  } catch (thrown) {
    error = thrown
  }
  t.type(error, TemplatesError)
  t.same((error as TemplatesError).problems, [
    { locale: 'it', part: null, pointer: 'templates/it', rule: 'the service has no wording of its own in it: subject, text and html are all required (missing: subject, html)' },
    { locale: 'ja', part: null, pointer: 'defaultLocale', rule: 'defaultLocale ja has neither built-in wording nor templates in this tenant' }
  ], 'every problem, not only the first')
})

t.test('negotiation among a tenant\'s languages, with the built-in behaviour unchanged', async (t) => {
  const tenant = load({ templates: { 'pt-BR': { subject: 'Seu código', text: '{{ code }}', html: '{{ code }}' }, 'pt-PT': { subject: 'O seu código', text: '{{ code }}', html: '{{ code }}' } } })
  t.equal(tenant.negotiate('pt', undefined), 'pt-BR', 'a bare language picks the first of its regions')
  t.equal(tenant.negotiate('pt-pt', undefined), 'pt-PT', 'case-insensitive')
  t.equal(tenant.negotiate(undefined, 'pt-PT;q=0.9, pt-BR;q=0.8'), 'pt-PT')
  t.equal(tenant.negotiate(undefined, 'pt'), 'pt-BR')
  t.equal(tenant.negotiate('zz', 'nl'), 'en', 'nothing matches: the default')
  t.equal(tenant.match('pt-br'), 'pt-BR')
  t.equal(tenant.match('nl'), undefined)
  t.equal(negotiateLocale(undefined, 'fr-CA;q=0.8, de;q=0.9'), 'de', 'the service\'s own languages')
})

t.test('a template that breaks a rule for one dispatch only: the built-in wording goes out, and it is told', async (t) => {
  // The load's test renders use 1 and 10 minutes; 7 takes another branch.
  const templates = load({ templates: { en: { subject: 'Hi {{ brand }}', text: '{% if minutes == 7 %}no code{% else %}{{ code }}{% endif %}' } } })
  const fallbacks: unknown[] = []
  const seven = compose(templates, 'en', { ttlSeconds: 7 * 60, onTemplateFallback: (fallback) => { fallbacks.push(fallback) } })
  t.equal(seven.subject, 'Your Acme verification code', 'the whole message in the built-in wording')
  t.match(seven.text, CODE)
  t.same(fallbacks, [{ locale: 'en', part: 'text', rule: 'the output must contain the code exactly once; it has it 0 times' }])
  t.equal(compose(templates, 'en').subject, 'Hi Acme', 'other lifetimes are unaffected')
})

t.test('the registry refuses each tenant with a refused template alone, naming tenant, locale, part and rule of each', async (t) => {
  const file = {
    tiers: { s: { allowance: 1, window: '1d', sandboxAllowance: 1 } },
    tenants: [
      { id: 'good', tier: 's', keys: [], templates: { en: { subject: 'Hello {{ brand }}' } } },
      { id: 'acme', tier: 's', keys: [], templates: { fr: { subject: '{{ code }}', text: 'sans code' } } },
      { id: 'globex', tier: 's', keys: [], templates: { en: { html: '{% include "x" %}{{ code }}' } } }
    ]
  }
  const registry = registryFromJson(file)
  t.same([...registry.tenants.keys()], ['good'], 'the tenant whose templates pass is served')
  t.same([...registry.refused.values()].flatMap((refused) => refused.problems), [
    '/tenants/1/templates/fr/subject (tenant acme, locale fr, subject): the subject must not contain the code: subjects show in notifications and mailbox lists',
    '/tenants/1/templates/fr/text (tenant acme, locale fr, text): the template must contain the code, written {{ code }}',
    '/tenants/2/templates/en/html (tenant globex, locale en, html): the template does not parse: the include tag is not available: a template cannot read other templates or files (tag "include" not found, line:1, col:1)'
  ])

  const schema = (change: object): string => {
    try {
      const refused = registryFromJson({ ...file, tenants: [{ id: 'x', tier: 's', keys: [], ...change }] }).refused.get('x')
      return refused === undefined ? 'accepted' : refused.problems.join('; ')
    } catch (thrown) {
      return (thrown as Error).message
    }
  }
  t.match(schema({ defaultLocale: 'it', templates: { it: { text: '{{ code }}' } } }), /\/tenants\/0\/templates\/it \(tenant x, locale it\): the service has no wording of its own in it/, 'a language the service lacks, even as the default')
  t.match(schema({ defaultLocale: 'ja' }), /\/tenants\/0\/defaultLocale \(tenant x, locale ja\): defaultLocale ja has neither/)
  t.match(schema({ templates: { EN: { subject: 'x' } } }), /\/templates\/EN/, 'a language tag in its canonical case')
  t.match(schema({ templates: { en: {} } }), /\/templates\/en/, 'at least one part')
  t.match(schema({ templates: { en: { footer: 'x' } } }), /\/templates\/en\/footer/, 'only subject, text and html')
  t.match(schema({ constants: { legal: 'line one\nline two' } }), /\/constants\/legal/, 'constants are one line')
  t.match(schema({ constants: { 'not-a-name': 'x' } }), /\/constants\/not-a-name/, 'constant names are identifiers')
  t.match(schema({ constants: { long: 'x'.repeat(501) } }), /\/constants\/long/, 'constants are short')
  t.match(schema({ templates: { en: { html: { file: 'a.liquid', extra: 1 } } } }), /\/templates\/en\/html/, 'a file reference is only a path')
  t.equal(schema({ defaultLocale: 'de', constants: { a: 'b' } }), 'accepted')
})

t.test('a tenants file\'s templates load from templates/<tenant id>/ beside it, or from the folder given', async (t) => {
  const dir = t.testdir({ templates: { acme: { 'en.html': '<b>{{ code }}</b>' } }, elsewhere: { acme: { 'en.html': '<i>{{ code }}</i>' } } })
  const path = join(dir, 'tenants.json')
  writeFileSync(path, JSON.stringify({ tiers: { s: { allowance: 1, window: '1d', sandboxAllowance: 1 } }, tenants: [{ id: 'acme', tier: 's', keys: [], templates: { en: { html: { file: 'en.html' } } } }] }))
  t.equal(compose((await registryFromFile(path)).tenants.get('acme')!.templates, 'en').html, `<b>${CODE}</b>`)
  t.equal(compose((await registryFromFile(path, { templatesDir: join(dir, 'elsewhere') })).tenants.get('acme')!.templates, 'en').html, `<i>${CODE}</i>`)
})

t.test('every character around the code survives the splice, Latin-1 or not, and each dispatch gets its own code', async (t) => {
  const text = 'Ça coûte 5 €… ÿ ß — ✓ 🙂\n{{ code }}\nfin: ü\u00a0¿\ud83d\ude00'
  const html = '<p>Code: {{ code }} — “quoted” é</p>'
  const templates = load({ templates: { fr: { subject: 'Sujet é', text, html } } })
  const first = compose(templates, 'fr')
  t.equal(first.text, `Ça coûte 5 €… ÿ ß — ✓ 🙂\n${CODE}\nfin: ü\u00a0¿\ud83d\ude00`)
  t.equal(first.html, `<p>Code: ${CODE} — “quoted” é</p>`)
  const latin1 = load({ templates: { en: { subject: 'Hi', text: 'café ÿ\n{{ code }}\nnaïve', html: '<p>{{ code }} ñ</p>' } } })
  const second = compose(latin1, 'en', { code: '000111' })
  const third = compose(latin1, 'en', { code: '999888' })
  t.equal(second.text, 'café ÿ\n000111\nnaïve')
  t.equal(third.text, 'café ÿ\n999888\nnaïve', 'the kept pieces take the next code')
  t.equal(Buffer.from(second.html).toString(), '<p>000111 ñ</p>', 'encodes to the same UTF-8')
})
