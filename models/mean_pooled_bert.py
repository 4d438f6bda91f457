"""A BERT pair classifier that pools as a sentence-transformers encoder was trained to: the mean of the tokens.

``BertForSequenceClassification`` classifies the [CLS] token through BERT's pooler (dense + tanh). A sentence
encoder such as all-MiniLM-L6-v2 was trained on the mean of its tokens, never on [CLS]: on that base the
discriminator's pretraining sat at the class prior for 100 to all 250 of its CPU steps, and pooled by the mean
it leaves the prior within 50 to 100 (bench/RESULTS.md, "Pooled as the encoder was trained").

Self-contained (torch and transformers only): ``save_pretrained`` copies this file beside the weights, so
``transformers.pipeline(..., trust_remote_code=True)`` loads a checkpoint anywhere; this project registers the
classes with the Auto classes (``models.discriminator``), so its own loaders need no flag. The model type is
its own, so the Auto classes refuse it without that flag rather than load these weights as BERT and pool by [CLS]
(only ``BertForSequenceClassification`` named by hand would, with a model-type warning).
"""
from __future__ import annotations

import torch
from transformers import BertConfig, BertModel, BertPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

MEAN_POOLED_BERT = "tgr_mean_pooled_bert"


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of the token states that are not padding: a text scores the same alone and in any batch. The one
    masked mean of the project (``models.sentence_encoder.mean_pool`` normalises it, ``models.encoder_int8`` exports
    it); it lives here because this file travels alone beside a checkpoint's weights."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class MeanPooledBertConfig(BertConfig):
    model_type = MEAN_POOLED_BERT


class MeanPooledBertForSequenceClassification(BertPreTrainedModel):
    """BERT, the mean of the non-padding tokens' last hidden states, dropout, a linear layer to the labels."""

    config_class = MeanPooledBertConfig

    def __init__(self, config: MeanPooledBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = torch.nn.Dropout(dropout)
        self.classifier = torch.nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs) -> SequenceClassifierOutput:
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                        position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
                        output_hidden_states=output_hidden_states, return_dict=True)
        hidden = out.last_hidden_state
        pooled = hidden.mean(dim=1) if attention_mask is None else masked_mean(hidden, attention_mask)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                        attentions=out.attentions)


MeanPooledBertConfig.register_for_auto_class()
MeanPooledBertForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
