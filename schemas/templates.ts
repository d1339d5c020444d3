import { Type } from '@sinclair/typebox'

export const TemplatePreviewBody = Type.Object({
  locale: Type.Optional(Type.String({
    pattern: '^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8}){0,3}$',
    description: 'The language to render (BCP 47, matched as dispatch matches a request\'s `locale`: `fr-CA` renders `fr`). Unset: the tenant\'s default language. A language the tenant has no wording in answers 400 `LOCALE_NOT_AVAILABLE`.',
    examples: ['fr']
  })),
  code: Type.Optional(Type.String({ pattern: '^[0-9]{6}$', description: 'The sample code to show (6 digits). Unset: `123456`.', examples: ['042917'] })),
  minutes: Type.Optional(Type.Integer({ minimum: 1, maximum: 1440, description: 'The lifetime to show, in minutes. Unset: the tenant\'s own code lifetime.' }))
}, { $id: 'TemplatePreviewRequest', additionalProperties: false })

export const TemplatePreviewReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    locale: Type.String({ description: 'The language rendered.', examples: ['fr'] }),
    subject: Type.String({ description: 'The subject line, as sent.' }),
    text: Type.String({ description: 'The plain-text part, as sent.' }),
    html: Type.String({ description: 'The HTML part, as sent.' }),
    customParts: Type.Array(Type.Union([Type.Literal('subject'), Type.Literal('text'), Type.Literal('html')]), { description: 'The parts the tenant wrote for this language; the others are the service\'s own wording.' })
  })
}, { $id: 'TemplatePreviewReply', description: 'The verification message the tenant\'s users get in this language, rendered with the sample code, exactly as dispatch would send it.' })
